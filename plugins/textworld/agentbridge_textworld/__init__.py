"""TextWorld games as agentbridge environments."""
