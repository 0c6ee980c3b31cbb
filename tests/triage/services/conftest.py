import pytest

from triage.models import Tier


@pytest.fixture
def tiers(db):
    """One tier per ESI level, named as the default tiers."""
    names = ["Immediate", "Emergent", "Urgent", "Less urgent", "Non-urgent"]
    return [
        Tier.objects.create(
            name=name, sort_order=i, esi_levels=[i + 1], ttft_target_mean_s=1, ttft_target_p90_s=2,
            e2e_target_mean_s=10, e2e_target_p90_s=20,
        )
        for i, name in enumerate(names)
    ]
