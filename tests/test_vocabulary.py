"""The domain's words are defined once and imported everywhere else: the ESI scale (``scheduler/config.py``), a
call's statuses and their sets (``triage/call_status.py``), the audit actions (``triage.models.AuditAction``),
the scheduling policies (``scheduler.policies.POLICIES``). A copy typed elsewhere is how two parts of the system
come to disagree, so these tests look for copies in the product's code and its board script."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from scheduler.policies import POLICIES
from triage.call_status import CallStatus

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("config", "triage", "worker", "judgment", "inference", "scheduler", "training", "tools")
ESI_SCALE_HOME = ROOT / "scheduler/config.py"
STATUS_HOME = ROOT / "triage/call_status.py"
# The ESI scale written out: its bounds, its levels, a clamp onto it.
ESI_SCALE_LITERALS = re.compile(r"range\(1, 6\)|[(\[]1, 2, 3, 4, 5[)\]]|min\(5, |max\(1, min\(5,|1 <= \w+ <= 5")


def _sources() -> dict[Path, str]:
    return {path: path.read_text() for package in PRODUCT for path in (ROOT / package).rglob("*.py")
            if "migrations" not in path.parts}


def _status_members(node: ast.AST) -> list[str]:
    """``CallStatus.X`` elements of a tuple, list or set literal (all of them, or none)."""
    if not isinstance(node, ast.Tuple | ast.List | ast.Set) or len(node.elts) < 2:
        return []
    names = [e.attr for e in node.elts if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name)
             and e.value.id == "CallStatus"]
    return names if len(names) == len(node.elts) else []


def test_the_esi_scale_is_written_out_only_in_its_home():
    copies = [f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1} {m.group()}"
              for path, text in _sources().items() if path != ESI_SCALE_HOME
              for m in ESI_SCALE_LITERALS.finditer(text)]
    assert copies == []


def test_no_set_of_statuses_is_typed_outside_its_home():
    copies = [f"{path.relative_to(ROOT)}:{node.lineno} {_status_members(node)}"
              for path, text in _sources().items() if path != STATUS_HOME
              for node in ast.walk(ast.parse(text)) if _status_members(node)]
    assert copies == []


def test_the_board_script_types_no_status():
    board = re.sub(r'type === "[a-z.]+"', "", (ROOT / "static/js/board.js").read_text())  # event types
    assert [s.value for s in CallStatus if re.search(rf'["\']{s.value}["\']', board)] == []


def test_every_audit_action_is_a_member_of_its_enum():
    literal = [f"{path.relative_to(ROOT)}:{node.lineno} {kw.value.value}"
               for path, text in _sources().items() for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Call)
               for kw in node.keywords if kw.arg == "action" and isinstance(kw.value, ast.Constant)
               and isinstance(kw.value.value, str) and "." in kw.value.value]
    assert literal == []


def test_the_policy_names_are_listed_only_by_the_policy_registry():
    home = ROOT / "scheduler/policies/__init__.py"
    copies = []
    for path, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            if path != home and isinstance(node, ast.Tuple | ast.List | ast.Set) and len(node.elts) >= 3:
                names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if len(names & set(POLICIES)) >= 3:
                    copies.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert copies == []


def test_the_finders_find_copies():
    tree = ast.parse("a = (CallStatus.DONE, CallStatus.FAILED)\nb = (CallStatus.DONE, other)\n")
    assert [_status_members(n) for n in ast.walk(tree) if _status_members(n)] == [["DONE", "FAILED"]]
    assert ESI_SCALE_LITERALS.search("for level in range(1, 6):") and ESI_SCALE_LITERALS.search("min(5, x)")
