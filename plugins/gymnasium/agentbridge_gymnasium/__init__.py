"""Gymnasium environments as agentbridge text environments: each env declares a codec (observation → text,
action names), the policy answers ``<action>NAME</action>``, the env's rewards are the per-step rewards."""
