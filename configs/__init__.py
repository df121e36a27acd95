"""Config files: `get_config(arg)` with `:tiny`, `:small`, `:8b`, `:14b` variants."""
