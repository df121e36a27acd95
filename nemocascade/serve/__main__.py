"""`python -m nemocascade.serve --workdir=DIR [--stage=NAME] [--port=8000]` (see `cli`)."""

from nemocascade.serve import cli

if __name__ == "__main__":
    cli.main()
