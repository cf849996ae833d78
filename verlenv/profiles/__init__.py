"""What the user asks for: profiles, base images, the TOML schema, facts about verl and vLLM."""
