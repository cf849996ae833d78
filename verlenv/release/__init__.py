"""Accepted image -> registry and images/catalog.json; pull by digest on clusters."""
