"""GUI agent: MiniWoB++ tasks in real headless Chromium (screenshots for VLM agents, DOM text for text agents)."""
