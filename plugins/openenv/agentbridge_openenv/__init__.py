"""OpenEnv environment servers as agentbridge environments, over OpenEnv's own protocol (no ``openenv`` import)."""
