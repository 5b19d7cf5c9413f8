"""Integrations with training libraries: headroom.integrations.transformers."""
