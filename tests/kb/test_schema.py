"""The one schema description: it agrees with the typed model, and what is generated from it is current."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FAILING_KB, REPO, CliResult, overlay_kb
from triage.kb import generate
from triage.kb.schema import ENTRY, FILES, NODE
from triage.kb.shapes import ListOf, MapOf, OneOf, Shape

# Model fields that are not written in YAML: where the entry came from, and keys of a mapping.
DERIVED = {"source", "name", "id", "type"}


def _shapes() -> list[Shape]:
    found: dict[str, Shape] = {}

    def visit(kind: object) -> None:
        if isinstance(kind, Shape) and kind.name not in found:
            found[kind.name] = kind
            for field in kind.fields:
                visit(field.type)
        elif isinstance(kind, ListOf):
            visit(kind.item)
        elif isinstance(kind, MapOf):
            visit(kind.value)
        elif isinstance(kind, OneOf):
            for variant in kind.variants.values():
                visit(variant)

    for spec in FILES:
        visit(spec.top)
    return list(found.values())


@pytest.mark.parametrize("shape", _shapes(), ids=lambda s: s.name)
def test_every_shape_matches_its_model(shape: Shape) -> None:
    assert shape.model is not None
    model_fields = set(shape.model._fields)  # type: ignore[attr-defined]
    names = {f.name for f in shape.fields}
    assert names <= model_fields
    assert model_fields - names <= DERIVED


def test_generated_files_are_current() -> None:
    stale = generate.stale(REPO / "knowledge")
    assert stale == [], f"{[str(p) for p in stale]} are stale: run `triage kb build` and commit the result"


def test_kb_build_regenerates_stale_files(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    root = overlay_kb(tmp_path / "knowledge", FAILING_KB / "generated-current")
    assert generate.stale(root) == [root / "README.md", root / "schema.json"]
    assert run_cli("--kb", str(root), "kb", "check").returncode == 2
    assert run_cli("--kb", str(root), "kb", "build").returncode == 0
    assert generate.stale(root) == []
    assert "### `graph.yaml`" in (root / "README.md").read_text()
    assert run_cli("--kb", str(root), "kb", "check").returncode == 0


def test_json_schema_describes_every_field() -> None:
    schema = json.loads((REPO / "knowledge" / "schema.json").read_text())
    definitions = schema["definitions"]
    entry = definitions["entry"]
    assert set(entry["properties"]) == {f.name for f in ENTRY.fields}
    assert set(entry["required"]) == {f.name for f in ENTRY.fields if f.required}
    assert entry["additionalProperties"] is False
    assert "examples" in definitions["signature"]["properties"]
    for name in NODE.variants:
        assert definitions[name]["properties"]["type"] == {"const": name, "description": NODE.tag.doc}
    for spec in FILES:
        if spec.key != "entries":
            assert spec.key.removesuffix(".yaml") + "_file" in definitions


def test_every_real_entry_fits_the_json_schema_keys() -> None:
    entry = json.loads((REPO / "knowledge" / "schema.json").read_text())["definitions"]["entry"]
    import yaml

    for path in sorted((REPO / "knowledge" / "entries").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert set(data) <= set(entry["properties"]), path.name
        assert set(entry["required"]) <= set(data), path.name


def test_the_readme_shows_every_field() -> None:
    section = generate.readme_section()
    for shape in _shapes():
        for field in shape.fields:
            assert f"{field.name}:" in section, (shape.name, field.name)
