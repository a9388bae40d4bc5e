"""The engine-fact extraction scripts on small sources written here in each engine's declaration
style (no engine code is copied): the flags, kinds and choices they must read (issue 17)."""
from __future__ import annotations

import ast
import csv
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
import engine_facts_common as common      # noqa: E402
import engine_facts_megatron as megatron  # noqa: E402
import engine_facts_sglang as sglang      # noqa: E402

SGLANG_STYLE = '''
class Par:
    _NS_PATH = "parallel"
    size_a: A[int, Arg(help="x", aliases=["--size-alias"])] = 1
    on_b: A[bool, "switch"] = False
    mode_c: A[Optional[Literal["p", "q"]], Arg(help="m", choices=["p", "q", "r"])] = None
    quant_d: A[Optional[str], Arg(help="q", choices=SOME_CHOICES)] = None
    hidden_e: A[Optional[int], Arg(no_cli=True)] = None
    named_f: A[int, Arg(help="n", cli_name="--other-name")] = 0
    plain_g: int = 3
'''

MEGATRON_STYLE = '''
def _add(parser):
    group = parser.add_argument_group(title="t")
    group.add_argument("--alpha-size", type=int, default=1)
    group.add_argument("--beta", action="store_true")
    group.add_argument("--gamma", choices=["x", "y"], default="x")
    cfg = ArgumentGroupFactory(Cfg, exclude=["skip_me"])
'''
MEGATRON_CLASSES = '''
@dataclass
class Base:
    base_eps: float = field(default=1e-5, metadata={"argparse_meta": {"arg_names": ["--eps-name"]}})

@dataclass
class Cfg(Base):
    use_thing: bool = False
    keep_bias: bool = True
    skip_me: int = 0
    not_init: int = field(default=0, init=False)
    kind: Literal["a", "b"] = "a"
'''


def by_flag(rows):
    return {r["flag"]: r for r in rows}


def test_sglang_fields():
    rows = by_flag(sglang.field_rows(SGLANG_STYLE, {"SOME_CHOICES": ["q1", "q2"]}))
    assert set(rows) == {"--size-a", "--on-b", "--mode-c", "--quant-d", "--other-name"}   # no_cli, plain skipped
    assert rows["--size-a"]["kind"] == "int" and rows["--size-a"]["aliases"] == "--size-alias"
    assert rows["--on-b"]["kind"] == "bool"
    assert rows["--mode-c"]["choices"] == "p;q;r"              # Arg(choices=...) wins over the Literal
    assert rows["--quant-d"]["choices"] == "q1;q2"             # a constant of choices.py


def test_megatron_literal_and_dataclass_flags():
    tree = ast.parse(MEGATRON_STYLE)
    rows = by_flag(megatron.literal_flags(tree))
    assert rows["--alpha-size"]["kind"] == "int" and rows["--beta"]["kind"] == "bool"
    assert rows["--gamma"]["choices"] == "x;y"
    classes = {n.name: ("cfg.py", n) for n in ast.parse(MEGATRON_CLASSES).body if isinstance(n, ast.ClassDef)}
    [(path, flags)] = megatron.factory_flags(tree, classes)
    rows = by_flag(flags)
    # Megatron's naming: --field-name; bool default True -> --no-/--disable-; argparse_meta names win
    assert set(rows) == {"--eps-name", "--use-thing", "--no-keep-bias", "--kind"}
    assert rows["--no-keep-bias"]["aliases"] == "--disable-keep-bias"
    assert rows["--eps-name"]["kind"] == "float" and rows["--kind"]["choices"] == "a;b"


def test_write_rows_replaces_one_engine(tmp_path):
    table = tmp_path / "t.csv"
    row = {"version": "1", "kind": "int", "source_url": "https://x", "retrieved": "2026-12-03", "method": "read"}
    common.write_rows("a", [{**row, "engine": "a", "flag": "--x"}], table)
    common.write_rows("b", [{**row, "engine": "b", "flag": "--y"}], table)
    common.write_rows("a", [{**row, "engine": "a", "flag": "--z"}], table)
    with table.open() as f:
        assert [(r["engine"], r["flag"]) for r in csv.DictReader(f)] == [("a", "--z"), ("b", "--y")]


@pytest.mark.parametrize("src,kind,choices", [("int", "int", []), ("Optional[float]", "float", []),
                                              ("bool | None", "bool", []), ("Literal['a', 'b']", "choice", ["a", "b"]),
                                              ("list[int]", "list", [])])
def test_annotation_kinds(src, kind, choices):
    assert common.annotation_kind(ast.parse(src, mode="eval").body) == (kind, choices)
