"""The trained bundle on disk: ``predictors.json`` (manifest) + ``heads.safetensors`` (both heads' weights).

The encoder is not copied: the manifest names it (a path or hub id, or the bundled MiniLM package).
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
FORMAT = 3  # 3: the protocol head beside the ESI head, on the same [embeddings, named clinical features]


def _prefixed(prefix: str, state: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v.detach().contiguous() for k, v in state.items()}


def _unprefixed(prefix: str, tensors: dict[str, Any]) -> dict[str, Any]:
    return {k[len(prefix) + 1 :]: v for k, v in tensors.items() if k.startswith(prefix + ".")}


def write_bundle(directory: Path, *, esi: Any, length: Any, protocol: Any, manifest: dict[str, Any]) -> str:
    """Write the heads and the manifest; returns the bundle version."""
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / WEIGHTS_NAME
    tensors = {**_prefixed("esi", esi.head.state_dict()), **_prefixed("length", length.head.state_dict()),
               **_prefixed("protocol", protocol.head.state_dict())}
    esi_manifest = {**manifest["esi"], "thresholds": list(esi.thresholds), "clinical_features": list(esi.feature_names)}
    save_file(tensors, weights)
    manifest = {
        **manifest,
        "format": FORMAT,
        "weights": WEIGHTS_NAME,
        "esi": esi_manifest,
        "protocol": {**manifest["protocol"], "ids": list(protocol.ids), "threshold": protocol.threshold},
        "length": {
            **manifest["length"],
            "log_mean": length.log_mean,
            "log_std": length.log_std,
            "max_tokens": length.max_tokens,
        },
    }
    digest = hashlib.sha256(weights.read_bytes())
    digest.update(json.dumps(manifest, sort_keys=True).encode())
    manifest["version"] = f"minilm-heads-{digest.hexdigest()[:12]}"
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest["version"]


def read_manifest(directory: Path) -> dict[str, Any]:
    return json.loads((directory / MANIFEST_NAME).read_text())


def read_bundle(directory: Path):  # -> TriagePredictor (import cycle kept out of the signature)
    from inference.clinical import load_catalogue

    from . import TriagePredictor
    from .embedding import SentenceEncoder
    from .esi import EsiClassifier, EsiHead
    from .length import LengthHead, LengthPredictor
    from .protocol import ProtocolClassifier, ProtocolHead

    manifest = read_manifest(directory)
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{directory / MANIFEST_NAME}: bundle format {manifest.get('format')!r}, this code reads {FORMAT}; "
            "run `python manage.py train_predictors`"
        )
    tensors = load_file(str(directory / manifest["weights"]))
    encoder = SentenceEncoder(manifest["encoder"], max_length=manifest["max_length"])
    esi_cfg, len_cfg = manifest["esi"], manifest["length"]
    names = tuple(esi_cfg["clinical_features"])
    esi_head = EsiHead(manifest["call_feature_dim"] + len(names), esi_cfg["hidden"], esi_cfg["dropout"])
    esi_head.load_state_dict(_unprefixed("esi", tensors))
    proto_cfg = manifest["protocol"]
    protocol_head = ProtocolHead(esi_head.net[0].in_features, proto_cfg["hidden"], proto_cfg["dropout"], len(proto_cfg["ids"]))
    protocol_head.load_state_dict(_unprefixed("protocol", tensors))
    length_head = LengthHead(manifest["call_feature_dim"], len_cfg["hidden"], len_cfg["dropout"])
    length_head.load_state_dict(_unprefixed("length", tensors))
    return TriagePredictor(
        encoder=encoder,
        esi=EsiClassifier(esi_head.eval(), tuple(esi_cfg["thresholds"]), names),
        protocol=ProtocolClassifier(protocol_head.eval(), tuple(proto_cfg["ids"]), proto_cfg["threshold"]),
        length=LengthPredictor(length_head.eval(), len_cfg["log_mean"], len_cfg["log_std"], len_cfg["max_tokens"]),
        catalogue=load_catalogue(),
        version=manifest["version"],
    )
