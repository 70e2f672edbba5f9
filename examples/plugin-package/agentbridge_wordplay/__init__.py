"""Wordplay: an example agentbridge plugin (reverse a word with a tool, exact-match reward)."""
