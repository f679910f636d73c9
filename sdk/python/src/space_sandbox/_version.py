# The SDK's version is the server's: internal/version.Version is the one
# source, and internal/version's test fails when this copy differs.
__version__ = "0.1.0"
