"""The stages, one module per stage kind: sft, rm, rl (RLHF and RLVR stages), distill.

Their shared set-up is `trainer/stage_setup.py`; the on-policy loop the rl and
distill stages plug into is `trainer/onpolicy/`."""
