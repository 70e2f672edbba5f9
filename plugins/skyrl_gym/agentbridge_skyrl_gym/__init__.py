"""SkyRL-gym environments as agentbridge environments: ``skyrl_gym.make(env_class, env_config=, extras=)`` per
episode, the model's text to ``env.step``, its observation messages, rewards and ``done`` to the driver."""
