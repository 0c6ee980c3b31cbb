"""The trained bundle on disk: ``predictors.json`` (manifest), ``vocabulary.json`` (the n-gram terms and
their idf) and ``heads.safetensors`` (the three heads' weights). Nothing else is needed to serve it.

The version is a content hash, so the same training run always yields the same version string.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

MANIFEST_NAME = "predictors.json"
WEIGHTS_NAME = "heads.safetensors"
VOCABULARY_NAME = "vocabulary.json"
FORMAT = 4  # 4: linear heads on [word n-grams, named clinical features]; no sentence encoder


def _prefixed(prefix: str, state: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v.detach().contiguous() for k, v in state.items()}


def _unprefixed(prefix: str, tensors: dict[str, Any]) -> dict[str, Any]:
    return {k[len(prefix) + 1 :]: v for k, v in tensors.items() if k.startswith(prefix + ".")}


def write_bundle(
    directory: Path, *, vectoriser: Any, esi: Any, length: Any, protocol: Any, manifest: dict[str, Any]
) -> str:
    """Write the vocabulary, the heads and the manifest; returns the bundle version."""
    directory.mkdir(parents=True, exist_ok=True)
    vocabulary = directory / VOCABULARY_NAME
    vocabulary.write_text(json.dumps(vectoriser.to_json()) + "\n")
    weights = directory / WEIGHTS_NAME
    tensors = {**_prefixed("esi", esi.head.state_dict()), **_prefixed("length", length.head.state_dict()),
               **_prefixed("protocol", protocol.head.state_dict())}
    esi_manifest = {**manifest["esi"], "thresholds": list(esi.thresholds), "clinical_features": list(esi.feature_names)}
    save_file(tensors, weights)
    manifest = {
        **manifest,
        "format": FORMAT,
        "weights": WEIGHTS_NAME,
        "vocabulary": VOCABULARY_NAME,
        "esi": esi_manifest,
        "protocol": {**manifest["protocol"], "ids": list(protocol.ids), "threshold": protocol.threshold,
                     "margin": protocol.margin},
        "length": {
            **manifest["length"],
            "log_mean": length.log_mean,
            "log_std": length.log_std,
            "max_tokens": length.max_tokens,
        },
    }
    digest = hashlib.sha256(weights.read_bytes())
    digest.update(vocabulary.read_bytes())
    digest.update(json.dumps(manifest, sort_keys=True).encode())
    manifest["version"] = f"ngram-heads-{digest.hexdigest()[:12]}"
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest["version"]


def read_manifest(directory: Path) -> dict[str, Any]:
    return json.loads((directory / MANIFEST_NAME).read_text())


def read_bundle(directory: Path):  # -> TriagePredictor (import cycle kept out of the signature)
    from judgment.clinical import load_catalogue

    from .esi import EsiClassifier
    from .length import LengthPredictor
    from .linear import LinearHead
    from .ngrams import NgramVectoriser
    from .predictor import TriagePredictor
    from .protocol import ProtocolClassifier

    manifest = read_manifest(directory)
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{directory / MANIFEST_NAME}: bundle format {manifest.get('format')!r}, this code reads {FORMAT}; "
            "run `python manage.py train_predictors`"
        )
    tensors = load_file(str(directory / manifest["weights"]))
    vectoriser = NgramVectoriser.from_json(json.loads((directory / manifest["vocabulary"]).read_text()))
    esi_cfg, len_cfg, proto_cfg = manifest["esi"], manifest["length"], manifest["protocol"]
    return TriagePredictor(
        vectoriser=vectoriser,
        esi=EsiClassifier(LinearHead.from_state_dict(_unprefixed("esi", tensors)), tuple(esi_cfg["thresholds"]),
                          tuple(esi_cfg["clinical_features"]), esi_cfg["clinical_weight"]),
        protocol=ProtocolClassifier(LinearHead.from_state_dict(_unprefixed("protocol", tensors)),
                                    tuple(proto_cfg["ids"]), proto_cfg["threshold"], proto_cfg["clinical_weight"],
                                    proto_cfg.get("margin", 0.0)),
        length=LengthPredictor(LinearHead.from_state_dict(_unprefixed("length", tensors)), len_cfg["log_mean"],
                               len_cfg["log_std"], len_cfg["max_tokens"]),
        catalogue=load_catalogue(),
        version=manifest["version"],
    )
