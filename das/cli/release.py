"""`das release verify OUT [OUT ...] --trust-root FILE [--trusted-keys FILE] [--ledger-id ID]
[--json]`: prove a release, outside the enclave. `das release check-root NEW --trust-root OLD`:
whether a newer trust root extends the one held.

``verify`` checks the certificate every release carries (``CERTIFICATE.intoto.json``, an
in-toto statement in a DSSE envelope) with public keys only — no ledger, no Prefect server, no
record — against the **trust root** the agency publishes (``das ledger trust-root`` writes it;
check the file against its published SHA-256 first: ``sha256sum -c``): the release's charter
chain must be the root's on every version the root holds (another "charter version 1" is not
the agency's) and signed by a quorum of the charter before on every later one, each charter
valid (a quorum from 1 to its approvers). Then the certificate signed by a run key that charter
names, a quorum of its approvers on an approval of exactly this release's sealed parameters,
dataset and spend (per pass this run's total, the cumulative total within the approved one,
spent before the approval expired), the files exactly those certified and listed by the
MANIFEST (nothing added, nothing missing), and a release labelled private. Without
``--trust-root`` a release is never proven: the command says what is missing. ``--trusted-keys``
(the approvers' published keys) and ``--ledger-id`` restrict further; a ``--ledger-id`` no
root pins is a usage error. ``--trust-root`` is repeatable, one per production ledger. Several
releases at once: an approval spent by two of them with other content, or two different
charters of one version of a ledger, fail them all.

``check-root`` reads both roots whole and proves that NEW begins with OLD's chain and that each
later charter is signed by a quorum of the one before: then NEW may be pinned in OLD's place.

Exit codes: 0 proven (extends), 1 not proven (does not extend; every reason is listed), 2 usage
error.
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
        help="check a release's certificate against the published trust root",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("release", nargs="+", type=resolved_path, help="a release folder")
    verify.add_argument(
        "--trust-root",
        action="append",
        default=[],
        type=resolved_path,
        help="the trust root the agency publishes for its production ledger (das ledger "
        "trust-root), checked against its published SHA-256 first; repeatable, one per ledger",
    )
    verify.add_argument(
        "--trusted-keys",
        type=resolved_path,
        help="also: the approvers' published OpenSSH public keys, one per line; only their "
        "signatures count",
    )
    verify.add_argument(
        "--ledger-id",
        action="append",
        default=[],
        help="also: the production ledger's id (repeatable): a release of any other ledger is "
        "not proven",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object on stdout")
    verify.set_defaults(handler=_verify)
    check = commands.add_parser(
        "check-root",
        help="whether a newer trust root extends the one you hold (before pinning it)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("new", type=resolved_path, help="the newer trust root")
    check.add_argument(
        "--trust-root", required=True, type=resolved_path, help="the trust root you hold now"
    )
    check.set_defaults(handler=_check_root)


def _usage(message: str) -> int:
    print(f"das release: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _verify(args: argparse.Namespace) -> int:
    from das.trust import (
        RootInvalid,
        SigningError,
        load_keys_file,
        read_trust_root,
        verify_releases,
    )

    trusted = None
    if args.trusted_keys is not None:
        try:
            trusted = load_keys_file(args.trusted_keys)
        except (SigningError, OSError) as exc:
            return _usage(f"--trusted-keys: {exc}")
    try:
        roots = [read_trust_root(path) for path in args.trust_root]
    except RootInvalid as exc:
        return _usage(f"--trust-root: {exc}")
    pinned = {root.ledger_id for root in roots}
    if len(pinned) != len(roots):
        return _usage("--trust-root: two roots of one ledger; pin one (das release check-root)")
    contradicting = sorted(set(args.ledger_id) - pinned) if roots else []
    if contradicting:
        return _usage(
            f"--ledger-id {', '.join(contradicting)} is not the ledger of any --trust-root "
            f"({', '.join(sorted(pinned))})"
        )
    proofs = verify_releases(args.release, trusted, args.ledger_id, roots=roots)
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
    """A proof in words, each line :func:`~das.trust.printable`: what the release holds (its
    files' names, its statements' text) never reaches the terminal as a control character."""
    from das.trust import printable

    def say(line: str) -> None:
        print(printable(line))

    facts = proof.facts
    if proof.proven:
        spend = ", ".join(
            f"{item['pass']} {_decimal(item['this_run'])} (cumulative "
            f"{_decimal(item['cumulative'])})"
            for item in facts.get("spend") or []
        )
        charter = facts["charter"]
        say(
            f"{proof.release}: PROVEN — a private {facts['product']} release of run "
            f"{facts['run_id']}, spend {spend} {facts['spend'][0]['definition']}, under charter "
            f"version {charter['version']} of ledger {facts['ledger']['id']} (trust root "
            f"{facts['trust_root'][:16]}); approval {facts['approval']} signed by "
            f"{len(facts['approved_by'])} of the {charter['quorum']} approvers it needs:"
        )
        for signer in facts["approved_by"]:
            say(f"  {signer}")
        say(f"  certificate signed by run key {', '.join(facts['signed_by_run_key'])}")
        return
    say(f"{proof.release}: NOT PROVEN")
    for problem in proof.problems:
        say(f"  - {problem}")


def _check_root(args: argparse.Namespace) -> int:
    from das.trust import RootInvalid, extension_problems, printable, read_trust_root

    try:
        held = read_trust_root(args.trust_root)
    except RootInvalid as exc:
        return _usage(f"--trust-root: {exc}")
    try:
        new = read_trust_root(args.new)
    except RootInvalid as exc:
        print(printable(f"{args.new}: DOES NOT EXTEND the pinned root: {exc}"))
        return EXIT_NOT_PROVEN
    problems = extension_problems(new, held)
    if problems:
        print(printable(f"{args.new}: DOES NOT EXTEND the pinned root ({held.describe()}):"))
        for problem in problems:
            print(printable(f"  - {problem}"))
        return EXIT_NOT_PROVEN
    added = new.newest.version - held.newest.version
    print(
        printable(
            f"{args.new}: EXTENDS the pinned root — {new.describe()}, SHA-256 {new.digest}: "
            + (
                f"charter version(s) {held.newest.version + 1} to {new.newest.version} each signed "
                "by a quorum of the one before; pin it in place of the one you hold"
                if added
                else "the same chain as the one you hold"
            )
        )
    )
    return EXIT_PROVEN


def _decimal(text: str) -> str:
    from das.privacy.mechanisms import parse_fraction_text
    from das.trust import decimal_text

    return decimal_text(parse_fraction_text(text))
