"""The gate's pipeline: one offer, decided in one transaction, with its ledger row.

The pieces live by what they hold: ``offer`` (the ``Offer`` and ``Decision`` types),
``keys`` (the keys an offer is held and counted under), ``rules`` (the rules, each decided
once), ``parking`` (the ledger and parked rows), ``stages`` and ``admit`` (the pipeline one
offer at a time) and ``many`` (a group commit's offers decided together). This module
names the pipeline's entry points for the rest of the engine.
"""

from __future__ import annotations

from .keys import flow_keys, key_pause_scopes, plain_row, primary_key, slot_of
from .many import offer_many
from .offer import Decision, Offer, admitted, reoffer
from .stages import STAGES, has_room, offer

__all__ = [
    "STAGES",
    "Decision",
    "Offer",
    "admitted",
    "flow_keys",
    "has_room",
    "key_pause_scopes",
    "offer",
    "offer_many",
    "plain_row",
    "primary_key",
    "reoffer",
    "slot_of",
]
