"""Pub/Sub emulator launcher (placeholder, filled in by the launcher work)."""
