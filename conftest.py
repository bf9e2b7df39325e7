"""Settings shared by every test of the workspace."""

from hypothesis import settings

# The CI machine is shared and noisy: a slow example is not a failure.
settings.register_profile("ferroload", deadline=None, max_examples=100)
settings.load_profile("ferroload")
