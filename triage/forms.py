"""Forms for the board's actions (htmx posts them; they work without JavaScript too)."""

from __future__ import annotations

from django import forms

from triage.models import ESI_LEVELS
from triage.services.board import OUTCOME_MAX_CHARS

LEVEL_CHOICES = [(level, f"ESI {level}") for level in ESI_LEVELS]
OUTCOME_SUGGESTIONS = (
    "Ambulance dispatched",
    "Fire service dispatched",
    "Police dispatched",
    "Advice given, no dispatch",
    "Referred to primary care",
    "Duplicate call",
    "Caller unreachable",
)


class OverrideForm(forms.Form):
    level = forms.TypedChoiceField(label="New ESI level", choices=LEVEL_CHOICES, coerce=int)
    reason = forms.CharField(
        label="Reason (required, kept in the audit log)",
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    disputed_reason = forms.CharField(label="Which reason do you disagree with?", max_length=300, required=False)

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("Give a reason for the override.")
        return reason


class ConfirmLevelForm(forms.Form):
    """One of the two levels an uncertain verdict named (the service checks which)."""

    level = forms.TypedChoiceField(label="Confirm ESI level", choices=LEVEL_CHOICES, coerce=int)


class CloseForm(forms.Form):
    outcome = forms.CharField(
        label="Outcome",
        max_length=OUTCOME_MAX_CHARS,
        widget=forms.TextInput(attrs={"list": "outcome-suggestions", "autocomplete": "off"}),
    )


class AssignForm(forms.Form):
    """A supervisor's assignment (or a release: empty); the choices are the active dispatchers, read when made."""

    assigned_to = forms.TypedChoiceField(label="Assign to", required=False, coerce=int, empty_value=None)

    def __init__(self, *args: object, choices: list[tuple[int, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["assigned_to"].choices = [("", "nobody"), *choices]


class CancelForm(forms.Form):
    reason = forms.CharField(label="Reason (optional)", max_length=300, required=False)


class SearchForm(forms.Form):
    q = forms.CharField(label="Text, external id or address", required=False)
    status = forms.ChoiceField(label="Status", required=False)
    level = forms.TypedChoiceField(
        label="ESI", required=False, choices=[("", "Any")] + LEVEL_CHOICES, coerce=int, empty_value=None
    )
    closed = forms.ChoiceField(
        label="Closed",
        required=False,
        choices=[("", "Any"), ("yes", "Closed"), ("no", "Open")],
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        from triage.models import CallStatus

        super().__init__(*args, **kwargs)
        self.fields["status"].choices = [("", "Any")] + list(CallStatus.choices)


class ProtocolForm(forms.Form):
    """A dispatcher picks another dispatch protocol; the choices are the library's, read when the form is made."""

    protocol = forms.ChoiceField(label="Protocol to follow")

    def __init__(self, *args: object, choices: list[tuple[str, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["protocol"].choices = choices
