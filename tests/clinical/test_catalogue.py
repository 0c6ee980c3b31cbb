"""The clinical catalogue as data: big enough, every rule cited, and a broken edit refused with its place named."""

import shutil

import pytest

from judgment.clinical import CatalogueError, load_catalogue
from judgment.clinical.catalogue import default_catalogue_dir


def test_the_catalogue_holds_150_high_risk_and_life_threat_rules_each_citing_a_known_source():
    catalogue = load_catalogue()
    assert len(catalogue.rules) >= 150
    assert {r.point for r in catalogue.rules} == {"A", "B"}
    assert all(r.sources and set(r.sources) <= set(catalogue.sources) for r in catalogue.rules)
    assert len(catalogue.resource_rules) >= 50
    assert catalogue.version and len(catalogue.digest) == 64


@pytest.fixture
def editable(tmp_path):
    directory = tmp_path / "clinical"
    shutil.copytree(default_catalogue_dir(), directory)
    return directory


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        ("high_risk.yaml", "when: {any: [stroke_signs], none: [assault]}", "when: {any: [stroke_sign], none: [assault]}",
         "unknown concept 'stroke_sign'"),
        ("resources.yaml", "resources: [xray], source: [esi-c, ottawa]", "resources: [x-ray], source: [esi-c, ottawa]",
         "unknown resource"),
        ("high_risk.yaml", 'reason: "stroke signs (face, arm, speech)", source: [esi-b, nice-ng128]',
         'reason: "stroke signs (face, arm, speech)", source: [made-up]', "source 'made-up' is not listed"),
        ("concepts.yaml", '"stopped breathing"', '"stopped (breathing"', "unclosed ("),
    ],
)
def test_a_broken_edit_is_refused_naming_the_file_and_entry(editable, file, old, new, message):
    path = editable / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(CatalogueError, match=rf"{file}.*{message.replace('(', '[(]')}"):
        load_catalogue(editable)


def test_an_edited_catalogue_is_picked_up_with_a_new_digest(editable):
    before = load_catalogue(editable)
    path = editable / "high_risk.yaml"
    path.write_text(path.read_text().replace('reason: "stroke signs (face, arm, speech)"', 'reason: "FAST positive"', 1))
    after = load_catalogue(editable)
    assert after.digest != before.digest
    assert "FAST positive" in {r.reason for r in after.rules}
