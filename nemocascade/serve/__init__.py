"""An OpenAI-compatible HTTP server for a trained stage or a converted checkpoint.

`python -m nemocascade.serve --workdir=DIR` (`cli`); routes in `app`, request
checks and response fields in `protocol`, the reasoning parser and stream
deltas in `output`, the batching request queue in `engine`.
"""
