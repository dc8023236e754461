"""The `velamq` command line."""
