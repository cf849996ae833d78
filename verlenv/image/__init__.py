"""Verified wheels -> an image with labels and a manifest (base, context, build, services)."""
