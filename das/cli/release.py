"""`das release verify OUT [OUT ...] --trusted-keys FILE [--json]`: prove a release, outside the
enclave.

Checks the certificate every release carries (``CERTIFICATE.intoto.json``, an in-toto statement
in a DSSE envelope) with public keys only — no ledger, no Prefect server, no record: the charter
chain signed by approvers whose keys are in ``--trusted-keys`` (the approver keys the agency
publishes: OpenSSH public keys, one per line, or git's allowed-signers format), the certificate
signed by a run key that charter names, a quorum of trusted approvers on an approval of exactly
this release's sealed parameters, dataset and spend (per pass this run's total, the cumulative
total within the approved one, spent before the approval expired), the files exactly those
certified and listed by the MANIFEST (nothing added, nothing missing), and a release labelled
private. With ``--ledger-id`` (the production ledger's id the agency publishes with the keys),
a release of any other ledger fails — the same approvers may have chartered a test ledger.
Several releases at once: an approval spent by two of them with other content fails them all.

Exit codes: 0 proven, 1 not proven (every reason is listed), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from das.cli.arguments import resolved_path

EXIT_PROVEN, EXIT_NOT_PROVEN, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    release = subparsers.add_parser(
        "release",
        help="prove a release outside the enclave (das release verify)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = release.add_subparsers(dest="release_command", required=True)
    verify = commands.add_parser(
        "verify",
        help="check a release's certificate against the published approver keys",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("release", nargs="+", type=resolved_path, help="a release folder")
    verify.add_argument(
        "--trusted-keys",
        required=True,
        type=resolved_path,
        help="the approvers' published OpenSSH public keys, one per line",
    )
    verify.add_argument(
        "--ledger-id",
        action="append",
        default=[],
        help="the production ledger's id, as the agency publishes it beside the keys "
        "(repeatable): a release of any other ledger is not proven",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object on stdout")
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    from das.trust import SigningError, load_keys_file, verify_releases

    try:
        trusted = load_keys_file(args.trusted_keys)
    except (SigningError, OSError) as exc:
        print(f"das release verify: error: --trusted-keys: {exc}", file=sys.stderr)
        return EXIT_USAGE
    proofs = verify_releases(args.release, trusted, args.ledger_id)
    if args.json:
        result: dict[str, Any] = {
            "proven": all(p.proven for p in proofs),
            "releases": {
                str(p.release): {"proven": p.proven, "problems": p.problems, **p.facts}
                for p in proofs
            },
        }
        print(json.dumps(result))
    else:
        for proof in proofs:
            _print(proof)
    return EXIT_PROVEN if all(p.proven for p in proofs) else EXIT_NOT_PROVEN


def _print(proof: Any) -> None:
    facts = proof.facts
    if proof.proven:
        spend = ", ".join(
            f"{item['pass']} {_decimal(item['this_run'])} (cumulative "
            f"{_decimal(item['cumulative'])})"
            for item in facts.get("spend") or []
        )
        charter = facts["charter"]
        print(
            f"{proof.release}: PROVEN — a private {facts['product']} release of run "
            f"{facts['run_id']}, spend {spend} {facts['spend'][0]['definition']}, under charter "
            f"version {charter['version']} of ledger {facts['ledger']['id']}; approval "
            f"{facts['approval']} signed by {len(facts['approved_by'])} of the "
            f"{charter['quorum']} approvers it needs:"
        )
        for signer in facts["approved_by"]:
            print(f"  {signer}")
        print(f"  certificate signed by run key {', '.join(facts['signed_by_run_key'])}")
        return
    print(f"{proof.release}: NOT PROVEN")
    for problem in proof.problems:
        print(f"  - {problem}")


def _decimal(text: str) -> str:
    from das.privacy.mechanisms import parse_fraction_text
    from das.trust import decimal_text

    return decimal_text(parse_fraction_text(text))
