import pytest

from tests.fixtures.predictors import ARREST_TRANSCRIPT
from tests.triage.factories import make_call
from triage.services.assessments import call_triage_record


@pytest.fixture
def triaged_call(client_and_token, triage_predictor):
    """A cardiac arrest call from the main client, triaged by the trained predictors: ESI 1."""
    call = make_call(client=client_and_token[0], transcript=ARREST_TRANSCRIPT)
    [prediction] = triage_predictor.predict([call.transcript])
    call = call_triage_record(
        call=call, prediction=prediction, model_version=triage_predictor.version, latency_ms=1,
        catalogue_version=triage_predictor.catalogue_version,
    )
    assert call.level == 1
    return call
