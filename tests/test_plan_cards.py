"""The card table: common workstation and datacentre cards, each with its data sheet cited and
a memory.total that agrees with it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from oomdoctor.budget import cards
from oomdoctor.cli import cli


@pytest.mark.parametrize("card", cards.CARDS, ids=lambda c: c.label)
def test_every_card_cites_its_data_sheet_and_agrees_with_it(card: cards.Card) -> None:
    assert card.source and ("https://" in card.source or "no public data sheet" in card.source)
    assert card.mib_from
    # A data sheet's "24 GB" is 24 GiB of DRAM; memory.total is that less what ECC or the
    # driver keeps (T4: 15360 MiB of 16 GiB = 0.9375, the lowest here), never more.
    assert 0.93 <= card.mib / 1024 / card.sheet_gb <= 1.0, card


def test_cards_are_in_order_of_memory() -> None:
    """guess() takes the first card at or above an estimate: the table must be sorted."""
    sizes = [c.mib for c in cards.CARDS]
    assert sizes == sorted(sizes)


@pytest.mark.parametrize(
    ("name", "label", "mib"),
    [
        ("RTX 3090", "RTX 3090", 24576),
        ("NVIDIA GeForce RTX 3090", "RTX 3090", 24576),
        ("A6000", "RTX A6000", 49140),
        ("NVIDIA RTX A6000", "RTX A6000", 49140),
        ("A40", "A40", 46068),
        ("L40", "L40", 46068),
        ("Tesla V100-SXM2-16GB", "V100-16G", 16160),
        ("V100 32GB", "V100-32G", 32510),
        ("H100 PCIe", "H100-80G", 81559),
        ("H100 SXM", "H100-80G", 81559),
        ("H100 NVL", "H100-NVL", 95830),
        ("A10", "A10", 23028),
    ],
)
def test_new_card_names_resolve(name: str, label: str, mib: int) -> None:
    found = cards.find(name)
    assert found is not None and (found.label, found.mib) == (label, mib)
    result = CliRunner().invoke(
        cli, ["plan", "--gpu", name, "--weights", "2GiB", "--format", "json"]
    )
    assert result.exit_code == 0 and json.loads(result.stdout)["plan"]["card_mib"] == mib


def test_v100_alone_is_ambiguous() -> None:
    assert cards.find("V100") is None
    assert {"V100-16G", "V100-32G"} <= set(cards.nearest("V100"))
