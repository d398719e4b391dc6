"""`das ledger`: the privacy ledger, the system of record of every spend, and who may approve one.

  das ledger init     [--ledger DIR | --url URL] [--max-rho X] [--max-epsilon Y]
                      [--approvers FILE --quorum K --key KEY [--runner-key PUB ...]]
  das ledger charter  show | sign --key KEY | propose --key KEY [--approvers FILE] [--quorum K]
                      [--runner-key PUB ...]
  das ledger approve  --product P --config CONFIG --data DIR [--coterminous FILE] --key KEY
                      [--note TEXT] [--valid-days N] [--new-history]
  das ledger approve  --approval ID --key KEY [--new-history]
  das ledger reject   --approval ID --reason TEXT
  das ledger release  --run-id ID --reason TEXT
  das ledger show     [--output OUT] [--dataset ID] [--json]
  das ledger verify   [--release OUT ...] [--no-prefect] [--json]
  das ledger trust-root --output FILE

The ledger is ``--ledger DIR`` (a folder holding ``ledger.sqlite``), ``--url`` (a SQLAlchemy
URL, e.g. PostgreSQL; its password from DAS_LEDGER_PASSWORD_FILE), else ``DAS_LEDGER_URL`` /
``DAS_LEDGER_DIR``, else (outside production) the per-user default.

A **production ledger has a charter**: the approvers' OpenSSH public keys (``--approvers``: one
per line, or git's allowed-signers format), the quorum of distinct approvers a spend needs, the
run keys whose runs sign releases (``--runner-key``; by default this account's run key,
DAS_RUN_KEY), the ceilings — signed by a quorum of the approvers it names (``--key`` signs
first; the others run ``charter sign``). Every run against a chartered ledger is a production
run. A spend is approved by a quorum signing one statement of exactly it (``approve --key``;
the second approver finds the first's statement and signs the same). ``--key`` is an approver's
private key file, or its ``.pub`` when the private half is in ssh-agent. Before a key signs, its
owner is shown the statement and what their own journal knows (a second ledger, records
approved elsewhere, approvals this ledger no longer holds); such findings need
``--new-history``. ``verify`` checks the chain, the charters, the Prefect server's witnessed
heads, and each ``--release`` against the ledger. ``trust-root`` writes what verifiers pin —
the ledger's id and its charter chain in force, with the signatures that count — to a new
file, and prints its SHA-256 as ``sha256sum`` does: publish both beside the releases, again
after each new charter (``das release verify OUT --trust-root FILE``).

Exit codes: 0 done / intact, 1 verification found problems, 2 refused or usage error, 3 the
ledger or the Prefect server could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

from das.cli.arguments import positive_int, resolved_path

UNITS = {"zcdp": "rho (zCDP)", "puredp": "epsilon (pure DP)"}
EXIT_OK, EXIT_PROBLEMS, EXIT_REFUSED = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    ledger = subparsers.add_parser(
        "ledger",
        help="the privacy ledger: init, charter, approve, show, verify",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = ledger.add_subparsers(dest="ledger_command", required=True)

    init = commands.add_parser("init", help="create a ledger (once); with --approvers, chartered")
    _where(init)
    init.add_argument("--max-rho", help="ceiling per pass under zCDP (default and maximum 10)")
    init.add_argument(
        "--max-epsilon", help="ceiling per pass under pure DP (default and maximum 30)"
    )
    _charter_options(init)
    init.set_defaults(handler=_reporting_faults(_init))

    charter = commands.add_parser("charter", help="the approvers, quorum and run keys")
    charter_commands = charter.add_subparsers(dest="charter_command", required=True)
    show = charter_commands.add_parser("show", help="the charters and which is in force")
    _where(show)
    show.add_argument("--json", action="store_true", help="one JSON object on stdout")
    show.set_defaults(handler=_reporting_faults(_charter_show))
    sign = charter_commands.add_parser("sign", help="add your signature to a pending charter")
    _where(sign)
    sign.add_argument("--key", required=True, type=resolved_path, help="your approver key")
    sign.add_argument("--charter", help="the charter's digest (prefix); default: the pending one")
    sign.add_argument("--new-history", action="store_true", help="sign a charter of a ledger "
                      "your journal does not know, though you signed for others")  # fmt: skip
    sign.set_defaults(handler=_reporting_faults(_charter_sign))
    propose = charter_commands.add_parser(
        "propose", help="a new charter continuing the one in force (rotate approvers or keys)"
    )
    _where(propose)
    _charter_options(propose, required=False)
    propose.add_argument("--max-rho", help="the new ceiling per pass under zCDP")
    propose.add_argument("--max-epsilon", help="the new ceiling per pass under pure DP")
    propose.set_defaults(handler=_reporting_faults(_charter_propose))

    approve = commands.add_parser(
        "approve", help="sign the spend of a config on one dataset (an approver's key)"
    )
    _where(approve)
    approve.add_argument(
        "--product", choices=("safetab-p", "phsafe"), help="the product whose spend is approved"
    )
    approve.add_argument("--config", type=resolved_path, help="config.json (spec files beside it)")
    approve.add_argument("--data", type=resolved_path, help="the folder of the records to spend on")
    approve.add_argument(
        "--coterminous", type=resolved_path, help="SafeTab-P: the run's coterminous file"
    )
    approve.add_argument("--approval", help="sign this pending approval (a paused run's request)")
    approve.add_argument(
        "--key", type=resolved_path, help="your approver key (required for a chartered ledger)"
    )
    approve.add_argument("--note", default="", help="why (part of the signed statement)")
    approve.add_argument(
        "--valid-days", type=positive_int, default=7, help="how long it may be spent (default 7)"
    )
    approve.add_argument("--new-history", action="store_true",
                         help="sign although your journal found another history")  # fmt: skip
    approve.add_argument("--json", action="store_true", help="one JSON object on stdout")
    approve.set_defaults(handler=_reporting_faults(_approve))

    reject = commands.add_parser("reject", help="reject a pending approval (nothing is spent)")
    _where(reject)
    reject.add_argument("--approval", required=True, help="the approval's id")
    reject.add_argument("--reason", required=True, help="why (recorded)")
    reject.set_defaults(handler=_reporting_faults(_reject))

    release = commands.add_parser(
        "release", help="return the reservation of a run that stopped before its first draw"
    )
    _where(release)
    release.add_argument("--run-id", required=True, help="the run")
    release.add_argument("--reason", required=True, help="why (recorded with who)")
    release.set_defaults(handler=_reporting_faults(_release))

    show_ledger = commands.add_parser("show", help="print runs, spend, approvals and totals")
    where = _where(show_ledger)
    where.add_argument(
        "--output", type=resolved_path, help="a release folder: the ledger its run used"
    )
    show_ledger.add_argument("--dataset", help="only this dataset (its id, or a prefix of it)")
    show_ledger.add_argument("--json", action="store_true", help="one JSON object on stdout")
    show_ledger.set_defaults(handler=_reporting_faults(_show))

    verify = commands.add_parser("verify", help="check the chain and releases against it")
    _where(verify)
    verify.add_argument(
        "--release", type=resolved_path, action="append", default=[], help="a release folder"
    )
    verify.add_argument(
        "--no-prefect",
        action="store_true",
        help="do not check the ledger against the heads the Prefect server recorded",
    )
    verify.add_argument("--json", action="store_true", help="one JSON object on stdout")
    verify.set_defaults(handler=_reporting_faults(_verify))

    trust_root = commands.add_parser(
        "trust-root",
        help="write the trust root verifiers pin (the ledger's id and charter chain)",
    )
    _where(trust_root)
    trust_root.add_argument(
        "--output", required=True, type=resolved_path,
        help="the file to write (a new file: never overwritten); publish it with the SHA-256 "
        "printed on stdout",
    )  # fmt: skip
    trust_root.set_defaults(handler=_reporting_faults(_trust_root))


def _charter_options(parser: argparse.ArgumentParser, required: bool = False) -> None:
    parser.add_argument("--approvers", type=resolved_path,
                        help="the approvers' OpenSSH public keys, one per line")  # fmt: skip
    parser.add_argument("--quorum", type=positive_int,
                        help="distinct approvers a spend (and a new charter) needs")  # fmt: skip
    parser.add_argument(
        "--runner-key", type=resolved_path, action="append", default=[],
        help="a run key's public half (.pub) whose runs may sign releases (repeatable; "
        "default: this account's run key, DAS_RUN_KEY)",
    )  # fmt: skip
    parser.add_argument("--key", type=resolved_path, required=required,
                        help="your approver key: signs the charter")  # fmt: skip
    parser.add_argument("--new-history", action="store_true",
                        help="sign although your journal knows other ledgers")  # fmt: skip


def _reporting_faults(handler: Any) -> Any:
    """``handler`` with a ledger it cannot reach said in one line (exit 3), and everything it
    refuses (a setting, a key, a signature, a refusal of the ledger) in one line (exit 2)."""

    def run(args: argparse.Namespace) -> int:
        from das.io.tables import InputFormatError
        from das.refusal import RunRefused
        from das.runs.faults import EXIT_INFRASTRUCTURE
        from das.trust import LedgerUnavailable, SigningError

        command = args.ledger_command + (
            f" {args.charter_command}" if args.ledger_command == "charter" else ""
        )
        prefix = "das" if command.startswith("runs") else "das ledger"
        try:
            return int(handler(args))
        except LedgerUnavailable as exc:
            return _fail(command, str(exc), EXIT_INFRASTRUCTURE, prefix)
        except (RunRefused, SigningError, ValueError, InputFormatError, OSError) as exc:
            if isinstance(exc, RunRefused):
                return _fail(command, exc.explained("cli"), prefix=prefix)
            return _fail(command, str(exc), prefix=prefix)

    return run


def _where(parser: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--ledger", type=resolved_path, help="ledger folder (default: DAS_LEDGER_DIR)"
    )
    group.add_argument("--url", help="ledger database URL (default: DAS_LEDGER_URL)")
    return group


def _store(args: argparse.Namespace) -> Any:
    from das.trust import LedgerStore, ledger_store

    if getattr(args, "ledger", None) is not None:
        return LedgerStore.in_directory(args.ledger)
    if getattr(args, "url", None):
        from das.trust import LEDGER_PASSWORD_FILE_ENV, configured_store, url_without_password

        # The password, if any, from DAS_LEDGER_PASSWORD_FILE: never on the command line.
        url = url_without_password(args.url, "--url")
        secret = os.environ.get(LEDGER_PASSWORD_FILE_ENV, "")
        return configured_store({"DAS_LEDGER_URL": url, LEDGER_PASSWORD_FILE_ENV: secret})
    output = getattr(args, "output", None)
    if output is not None:
        return _store_of_release(output)
    return ledger_store()


def _store_of_release(output: Path) -> Any:
    """The ledger a release's run used, from its audit (the release's, or a run's in the
    state root)."""
    from das.runs.folder import state_root
    from das.trust import LedgerStore

    audits = [output / "audit.json", *sorted((state_root() / "runs").glob("*/audit.json"))]
    for path in audits:
        try:
            audit = json.loads(path.read_text())
            if path.parent != output and audit["parameters"]["output"] != str(output):
                continue
            location = audit["privacy_ledger"]["ledger"]
        except (OSError, KeyError, TypeError, json.JSONDecodeError):
            continue
        if location.endswith(".sqlite"):
            return LedgerStore.in_directory(Path(location).parent)
        raise ValueError(f"{output} used the ledger {location}: pass it with --url")
    raise ValueError(f"{output}: no audit names the ledger its run used")


def _ledger(args: argparse.Namespace) -> Any:
    from das.trust import PrivacyLedger

    return PrivacyLedger(_store(args))


def _fail(command: str, message: str, code: int = EXIT_REFUSED, prefix: str = "das ledger") -> int:
    print(f"{prefix} {command}: {message}", file=sys.stderr)
    return code


def _say(text: str) -> None:
    """Print ``text`` with the control and format characters of each of its lines escaped
    (:func:`das.trust.printable`): much of what these commands print comes from the ledger's
    database, which an insider can write — an entry's kind or run id holding terminal escapes
    must not erase or hide the verdict printed above it."""
    from das.trust import printable

    print("\n".join(printable(line) for line in str(text).split("\n")), flush=True)


# -- init and the charter ----------------------------------------------------------------------


def _ceilings(args: argparse.Namespace) -> dict[str, Fraction]:
    ceilings = {}
    for definition, text in (("zcdp", args.max_rho), ("puredp", args.max_epsilon)):
        if text is not None:
            try:
                ceilings[definition] = Fraction(text)
            except (ValueError, ZeroDivisionError):
                raise ValueError(f"not a number: {text!r}") from None
    return ceilings


def _runner_keys(paths: list[Path]) -> list[Any]:
    """The run keys a charter names: those given, else this account's run key."""
    from das.trust import public_key_of, run_key

    if paths:
        return [public_key_of(path) for path in paths]
    path, key = run_key()
    _say(f"run key: {key.fingerprint} ({path}; pass --runner-key for the service account's)")
    return [key]


def _approver_key(path: Path, approvers: Any, what: str) -> Any:
    from das.trust import public_key_of

    key = public_key_of(path)
    if key not in set(approvers):
        raise ValueError(
            f"{path} is key {key.fingerprint}, which is not one of the {what}: only they sign it"
        )
    return key


def _confirm_history(journal: Any, needs: list[str], info: list[str], forced: bool) -> None:
    """Show the approver what their journal knows; findings need ``--new-history``."""
    for line in info:
        _say(f"  your journal: {line}")
    for line in needs:
        _say(f"  YOUR JOURNAL: {line}")
    if needs and not forced:
        raise ValueError(
            "not signed: your journal found another history (above). If this is deliberate, "
            "run the command again with --new-history"
        )


def _init(args: argparse.Namespace) -> int:
    import uuid

    from das.trust import (
        CHARTER_NAMESPACE,
        ApproverJournal,
        Charter,
        PrivacyLedger,
        canonical_json,
        charter_statement,
        decimal_text,
        ledger_ceilings,
        load_keys_file,
        sign,
    )

    store = _store(args)
    limits = ledger_ceilings(_ceilings(args))
    charter = None
    if args.approvers is not None or args.key is not None or args.quorum is not None:
        if args.approvers is None or args.key is None or args.quorum is None:
            raise ValueError("a chartered ledger needs --approvers FILE, --quorum K and --key KEY")
        approvers = load_keys_file(args.approvers)
        key = _approver_key(args.key, approvers, "approvers in " + str(args.approvers))
        ledger_id = str(uuid.uuid4())
        statement = charter_statement(
            ledger_id=ledger_id, approvers=approvers, quorum=args.quorum,
            runners=_runner_keys(args.runner_key), ceilings=limits, previous=None,
        )  # fmt: skip
        _say(Charter(statement, 0, "").summary())
        journal = ApproverJournal.of(key)
        info, needs = journal.charter_history(ledger_id, 1)
        _confirm_history(journal, needs, info, args.new_history)
        signature = sign(canonical_json(statement), CHARTER_NAMESPACE, args.key)
        ledger = PrivacyLedger.initialize(
            store, limits, ledger_id=ledger_id, charter=(statement, signature)
        )
        journal.record_charter(ledger_id, Charter(statement, 0, "").digest, 1)
        charter = statement
    else:
        ledger = PrivacyLedger.initialize(store, limits)
    info = ledger.info()
    shown = ", ".join(f"{UNITS[d]} {decimal_text(v)}" for d, v in sorted(limits.items()))
    _say(f"created privacy ledger {info.ledger_id} at {info.location}")
    _say(f"ceilings per pass of a dataset: {shown}")
    if charter is None:
        _say(
            "no charter: not a production ledger. Runs against it need no approval and their "
            "releases prove nothing to a verifier (das release verify). A production ledger: "
            "das ledger init --approvers FILE --quorum K --key KEY"
        )
    else:
        chain = ledger.charter_chain()
        if chain.in_force is None:
            needed = int(charter["quorum"]) - 1
            where = _where_flag(info)
            _say(
                f"charter signed by you; it needs {needed} more approver signature(s) before "
                f"anything can be spent. Each other approver: das ledger charter sign {where}"
                "--key <their key>"
            )
        else:
            _say("charter in force (signed by a quorum)")
    _say(f"in production (das run, deployments): DAS_LEDGER_ID={info.ledger_id} pins this ledger")
    return EXIT_OK


def _where_flag(info: Any) -> str:
    location = str(info.location)
    if location.endswith(".sqlite"):
        return f"--ledger {Path(location).parent} "
    return '--url "$DAS_LEDGER_URL" '


def _charter_json(chain: Any) -> dict[str, Any]:
    def one(charter: Any) -> dict[str, Any]:
        eligible, quorum = chain.required(charter)
        signers, rejected = charter.signers(eligible)
        return {
            "digest": charter.digest,
            "version": charter.version,
            "in_force": chain.in_force is not None and charter.digest == chain.in_force.digest,
            "statement": charter.statement,
            "signed_by": sorted(k.fingerprint for k in signers),
            "needs": quorum,
            "signatures_not_counted": rejected,
        }

    return {
        "chartered": chain.chartered,
        "in_force": None if chain.in_force is None else chain.in_force.digest,
        "charters": [one(c) for c in chain.charters],
    }


def _charter_show(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    info = ledger.require_intact()
    chain = ledger.charter_chain()
    data = _charter_json(chain)
    if args.json:
        print(json.dumps({"ledger_id": info.ledger_id, **data}))
        return EXIT_OK
    if not chain.chartered:
        _say(f"privacy ledger {info.ledger_id}: no charter (not a production ledger)")
        return EXIT_OK
    for charter, item in zip(chain.charters, data["charters"], strict=True):
        state = "IN FORCE" if item["in_force"] else "pending" if charter.seq > (
            chain.in_force.seq if chain.in_force else 0) else "superseded"  # fmt: skip
        _say(f"[{state}] " + charter.summary().rstrip())
        _say(f"  signed by {len(item['signed_by'])} of the {item['needs']} needed: "
             + ", ".join(item["signed_by"]))  # fmt: skip
        for line in item["signatures_not_counted"]:
            _say(f"  not counted: {line}")
    return EXIT_OK


def _charter_sign(args: argparse.Namespace) -> int:
    from das.trust import CHARTER_NAMESPACE, ApproverJournal, sign

    ledger = _ledger(args)
    info = ledger.require_intact()
    chain = ledger.charter_chain()
    charter = chain.find(args.charter) if args.charter else chain.pending
    if charter is None:
        raise ValueError(
            "no pending charter to sign" if not args.charter else f"no charter {args.charter}"
        )
    eligible, quorum = chain.required(charter)
    key = _approver_key(args.key, eligible, "approvers who must sign this charter")
    _say(charter.summary().rstrip())
    journal = ApproverJournal.of(key)
    notes, needs = journal.charter_history(charter.ledger_id, charter.version)
    _confirm_history(journal, needs, notes, args.new_history)
    signature = sign(charter.message, CHARTER_NAMESPACE, args.key)
    signed = ledger.sign_charter(charter.digest, signature)
    journal.record_charter(charter.ledger_id, charter.digest, charter.version)
    signers, _ = signed.signers(eligible)
    after = ledger.charter_chain()
    if after.in_force is not None and after.in_force.digest == charter.digest:
        _say(f"signed: charter version {charter.version} of ledger {info.ledger_id} is in force "
             f"({len(signers)} of {quorum} signatures)")  # fmt: skip
    else:
        _say(f"signed: {len(signers)} of the {quorum} signatures it needs")
    return EXIT_OK


def _charter_propose(args: argparse.Namespace) -> int:
    from das.trust import (
        CHARTER_NAMESPACE,
        ApproverJournal,
        Charter,
        canonical_json,
        charter_statement,
        ledger_ceilings,
        load_keys_file,
        sign,
    )

    if args.key is None:
        raise ValueError("--key KEY: the proposer signs the new charter")
    ledger = _ledger(args)
    info = ledger.require_intact()
    chain = ledger.charter_chain()
    current = chain.in_force
    if chain.chartered and current is None:
        raise ValueError("the ledger's first charter is not in force yet: sign it first")
    approvers = (
        load_keys_file(args.approvers) if args.approvers is not None
        else list(current.approvers) if current is not None else None
    )  # fmt: skip
    if approvers is None:
        raise ValueError("a ledger's first charter needs --approvers FILE and --quorum K")
    quorum = args.quorum or (current.quorum if current is not None else None)
    if quorum is None:
        raise ValueError("--quorum K: how many approvers a spend needs")
    runners = (
        _runner_keys(args.runner_key) if args.runner_key or current is None
        else list(current.runners)
    )  # fmt: skip
    limits = (
        ledger_ceilings(_ceilings(args)) if args.max_rho or args.max_epsilon or current is None
        else current.ceilings
    )  # fmt: skip
    statement = charter_statement(
        ledger_id=info.ledger_id, approvers=approvers, quorum=quorum, runners=runners,
        ceilings=limits, previous=current,
    )  # fmt: skip
    eligible = current.approvers if current is not None else approvers
    key = _approver_key(args.key, eligible, "approvers whose quorum this charter needs")
    proposed = Charter(statement, 0, "")
    _say(proposed.summary().rstrip())
    journal = ApproverJournal.of(key)
    notes, needs = journal.charter_history(info.ledger_id, proposed.version)
    _confirm_history(journal, needs, notes, args.new_history)
    signature = sign(canonical_json(statement), CHARTER_NAMESPACE, args.key)
    ledger.propose_charter(statement, signature)
    journal.record_charter(info.ledger_id, proposed.digest, proposed.version)
    needed = (current.quorum if current is not None else quorum) - 1
    if needed > 0:
        _say(f"proposed charter {proposed.digest[:16]}: it needs {needed} more signature(s): "
             f"das ledger charter sign {_where_flag(info)}--key <approver key>")  # fmt: skip
    else:
        _say(f"charter version {proposed.version} is in force")
    return EXIT_OK


# -- approvals -----------------------------------------------------------------------------------


def _check_witness(ledger: Any, info: Any, production: bool) -> None:
    """What a run checks before it spends, checked before an approver signs: the Prefect
    server's witnessed heads (when PREFECT_API_URL names it), so nobody signs against a ledger
    that was cut back or restored."""
    from prefect.settings import get_current_settings

    if not get_current_settings().api.url:  # PREFECT_API_URL, or a profile's
        _say("  (the Prefect server's witness was not asked: PREFECT_API_URL is not set)")
        return
    from tasks.ledger_witness import require_witnessed

    for notice in require_witnessed(ledger, info, production):
        _say(f"  note: {notice}")


def _approve(args: argparse.Namespace) -> int:
    from das.spend_approval import Proposal, propose, records_fingerprint, sign_proposal
    from das.trust import ApproverJournal, statement_problems, statement_text

    ledger = _ledger(args)
    info = ledger.require_intact()
    chain = ledger.charter_chain()
    _check_witness(ledger, info, chain.chartered)
    if chain.chartered and args.key is None:
        raise ValueError(
            "this is a production ledger (it has a charter): an approval is an approver's "
            "signature — give your key with --key (your private key file, or its .pub with "
            "the private half in ssh-agent)"
        )
    if not chain.chartered and args.key is not None:
        raise ValueError(
            "this ledger has no charter, so no key can be checked: approve without --key "
            "(outside production an approval is the operator's own record)"
        )
    if args.approval:
        approval = ledger.approval(args.approval)
        if approval is None:
            raise ValueError(f"no approval {args.approval} in this ledger")
        if chain.chartered and approval.run_id and approval.rejection is None:
            # its run was cancelled while it waited: withdrawn now, before anyone signs it
            _tell_waiting_run(ledger, approval.approval_id, before_signing=True)
            approval = ledger.approval(args.approval) or approval
        if approval.withdrawn:
            from das.trust import shown

            raise ValueError(
                f"approval {args.approval} was withdrawn "
                f"({shown((approval.rejection or {}).get('reason', ''))}): it authorizes "
                "nothing, and nobody needs to sign it"
            )
        fingerprint = None
        if args.data is not None and args.product is not None:
            fingerprint = records_fingerprint(args.product, args.data)
            if ledger.dataset_id(fingerprint) != approval.dataset:
                raise ValueError(f"approval {args.approval} is not about the records in "
                                 f"{args.data}")  # fmt: skip
        problems = statement_problems(approval.statement)
        if problems:
            raise ValueError(
                f"approval {args.approval} is not a statement this pipeline writes ("
                + "; ".join(problems)
                + "): it was written around the pipeline; nobody should sign it"
            )
        proposal = Proposal(approval.statement, approval, [], fingerprint)
    else:
        missing = [f"--{n}" for n in ("product", "config", "data") if getattr(args, n) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} required (or --approval ID)")
        proposal = propose(
            ledger, args.product, args.config, args.data, coterminous=args.coterminous,
            note=args.note, valid_days=args.valid_days,
        )  # fmt: skip
    statement = proposal.statement
    if not args.json:
        _say(statement_text(statement))
        if proposal.existing is not None and not args.approval:
            _say(
                "  you co-sign the statement another approver started (it says exactly what "
                "yours would): its note and its validity, shown above, are theirs — your "
                "--note and --valid-days are not used"
            )
    key = None
    if args.key is not None:
        assert chain.in_force is not None
        key = _approver_key(args.key, chain.in_force.approvers, "approvers of the charter")
        if proposal.existing is not None and key in proposal.existing.signers(chain.in_force)[0]:
            _say(f"approval {statement['approval_id']}: you signed it already")
            return EXIT_OK
        journal = ApproverJournal.of(key)
        mark = None if proposal.fingerprint is None else journal.records_mark(proposal.fingerprint)
        held = {a["approval_id"] for a in ledger.approvals()}
        notes, needs = journal.approval_history(info.ledger_id, mark, statement["passes"], held)
        if not args.json:
            _confirm_history(journal, needs, notes, args.new_history)
        elif needs and not args.new_history:
            raise ValueError("not signed: your journal found another history: " + "; ".join(needs))
    approval = sign_proposal(ledger, proposal, args.key)
    if key is not None:
        journal.record_approval(info.ledger_id, mark, statement)
    agreed, signers, needed = ledger.approval_agreed(approval.approval_id)
    if args.json:
        print(json.dumps({
            "approval_id": approval.approval_id, "statement": statement,
            "signed_by": [k.fingerprint for k in signers], "needed": needed, "agreed": agreed,
        }))  # fmt: skip
        return EXIT_OK
    if not chain.chartered:
        _say(f"recorded approval {approval.approval_id} (unsigned: this ledger has no charter)")
    elif agreed:
        _say(f"signed approval {approval.approval_id}: {len(signers)} of {needed} approvers — one "
             "run of these parameters on these records may now spend it")  # fmt: skip
    else:
        _say(f"signed approval {approval.approval_id}: {len(signers)} of {needed} approvers. "
             f"Each other approver: das ledger approve --approval {approval.approval_id} "
             f"{_where_flag(info)}--key <their key>")  # fmt: skip
    if chain.chartered and approval.run_id:  # a waiting run's request: tell the run
        _say(f"the run that asked for it: {_tell_waiting_run(ledger, approval.approval_id)}")
    return EXIT_OK  # the note was shown with the statement, before the signature


def _tell_waiting_run(ledger: Any, approval_id: str, before_signing: bool = False) -> str:
    """Resume (or update the page of) the suspended run that asked for ``approval_id``, or
    withdraw its request when it was cancelled, when the Prefect server is reachable (else the
    approvals sweep does it); what happened. ``before_signing``: only a cancelled run's
    request is acted on (withdrawn)."""
    from tasks.approval import nudge_from_terminal

    return nudge_from_terminal(ledger, approval_id, withdraw_only=before_signing)


def _reject(args: argparse.Namespace) -> int:
    from das.trust import who

    ledger = _ledger(args)
    ledger.require_intact()
    ledger.reject_approval(args.approval, args.reason, who(), "das ledger reject")
    _say(f"rejected approval {args.approval}: it authorizes nothing; a run waiting for it ends "
         "Refused")  # fmt: skip
    approval = ledger.approval(args.approval)
    if approval is not None and approval.run_id:
        _say(f"the run that asked for it: {_tell_waiting_run(ledger, args.approval)}")
    return EXIT_OK


def _release(args: argparse.Namespace) -> int:
    from das.trust import who

    ledger = _ledger(args)
    ledger.require_intact()
    run = ledger.run(args.run_id)
    if run is None:
        raise ValueError(f"no run {args.run_id} in this ledger")
    if run.drew:
        raise ValueError(
            f"run {args.run_id} drew noise (status {run.status}): its spend counts in full and "
            "cannot be returned. Resume it instead: it reuses its draws and spends nothing more"
        )
    if not ledger.release_reservation(args.run_id, args.reason, by=who()):
        raise ValueError(f"run {args.run_id} holds no reservation (status {run.status})")
    _say(f"released the reservation of run {args.run_id} (recorded: {who()}, your reason); "
         "it can no longer draw")  # fmt: skip
    return EXIT_OK


# -- show and verify -----------------------------------------------------------------------------


def _run_line(run: Any) -> dict[str, Any]:
    ended = run.ended or {}
    refused = ended.get("refused") if ended.get("kind") == "failed" else None
    if run.status == "released" and ended.get("by"):
        outcome = f"reservation returned by {ended['by']}: {ended.get('reason', '')}"
    elif run.status == "released":
        outcome = "stopped before its first draw (nothing spent)"
    elif run.status == "completed":
        outcome = "published"
    elif run.counting:
        outcome = "HOLDS ITS SPEND, never published (resume it)"
    else:
        outcome = "not yet authorized"
    return {
        "run_id": run.run_id,
        "product": run.product,
        "status": run.status,
        "outcome": outcome,
        "refused": refused,
        "production": run.production,
        "opened": run.opened,
        "attempts": run.attempt,
        "seed_mode": run.binding["seed_mode"],
        "markers": list(run.markers),
        "approval": run.approval,
        "output": run.output,
        "draws": len(run.draws),
        "passes": [p.to_dict() for p in run.passes],
    }


def ledger_summary(ledger: Any, dataset: str | None = None) -> dict[str, Any]:
    """Every dataset of the ledger: its runs (oldest first), approvals and cumulative totals."""
    info = ledger.info()
    runs = ledger.runs()
    approvals = ledger.approvals()
    chain = ledger.charter_chain()
    keys = sorted({r.dataset for r in runs if r.dataset} | {a["dataset"] for a in approvals})
    if dataset is not None:
        keys = [key for key in keys if key.startswith(dataset)]
    datasets = []
    for key in keys:
        mine = [r for r in runs if r.dataset == key]
        datasets.append({
            "dataset": key,
            "cumulative": ledger.totals(key),
            "not_private_runs": sorted({r.run_id for r in mine if r.not_private}),
            "runs": [_run_line(r) for r in mine],
            "approvals": [a for a in approvals if a["dataset"] == key],
        })  # fmt: skip
    unbound = [_run_line(r) for r in runs if r.dataset is None]
    return {
        "ledger": info.location,
        "ledger_id": info.ledger_id,
        "head": info.head(),
        "charter": _charter_summary(chain),
        "chartered": chain.chartered,
        "ceilings": {
            d: _decimal(v)
            for d, v in (chain.in_force.ceilings if chain.in_force else info.ceilings).items()
        },
        "datasets": datasets,
        "runs_without_dataset": unbound,
    }


def _charter_summary(chain: Any) -> dict[str, Any] | None:
    charter = chain.in_force
    if charter is None:
        return None
    return {
        "digest": charter.digest,
        "version": charter.version,
        "quorum": charter.quorum,
        "approvers": [k.to_dict() for k in charter.approvers],
    }


def _decimal(value: Any) -> str:
    from das.trust import decimal_text

    return decimal_text(value)


def _render(summary: dict[str, Any]) -> str:
    from das.privacy.mechanisms import parse_fraction_text
    from das.trust import shown

    ceilings = ", ".join(f"{UNITS[d]} {v}" for d, v in sorted(summary["ceilings"].items()))
    charter = summary["charter"]
    lines = [
        f"privacy ledger {summary['ledger_id']} at {summary['ledger']} "
        f"(head entry {summary['head']['seq']}; ceilings per pass: {ceilings})",
        (
            f"charter version {charter['version']} in force: {charter['quorum']} of "
            f"{len(charter['approvers'])} approvers sign a spend — a PRODUCTION ledger"
            if charter
            else (
                "charter proposed, NOT in force yet: nothing can be spent"
                if summary["chartered"]
                else "no charter: not a production ledger (its releases prove nothing)"
            )
        ),
    ]
    if not summary["datasets"]:
        lines.append("  no recorded spend")
    for item in summary["datasets"]:
        lines.append(f"\ndataset {item['dataset'][:16]}")
        for pass_name, totals in item["cumulative"].items():
            shown_totals = ", ".join(f"{UNITS[d]} {value}" for d, value in totals.items())
            lines.append(f"  cumulative, pass {pass_name}: {shown_totals}")
        if item["not_private_runs"]:
            lines.append(
                "  NOT PRIVATE runs (seeded or infinite budget): "
                + ", ".join(item["not_private_runs"])
            )
        for run in item["runs"]:
            spend = ", ".join(
                f"{p['pass']} {p['this_run']} (cumulative {p['cumulative']})" for p in run["passes"]
            )
            mode = {True: "production", False: "NOT production", None: ""}[run["production"]]
            lines.append(
                f"  run {run['run_id']} {run['product']} {mode}: {run['outcome']}; {spend}; "
                f"{run['draws']} draws; {run['seed_mode']}; opened {run['opened'][:19]}"
            )
            if run["refused"]:
                lines.append(f"    refused: {shown(run['refused'], 300)}")
        for approval in item["approvals"]:
            statement = approval["statement"]
            used = f"used by run {approval['used_by']}" if approval["used_by"] else "open"
            if approval["rejection"] and approval["rejection"].get("withdrawn"):
                rejection = approval["rejection"]
                used = (f"WITHDRAWN ({shown(rejection.get('reason', ''))}; "
                        f"{shown(rejection.get('by', ''))})")  # fmt: skip
            elif approval["rejection"]:
                rejection = approval["rejection"]
                used = (
                    f"REJECTED by {shown(rejection.get('by', ''))} (as typed, "
                    f"{shown(rejection.get('via', ''))}): {shown(rejection.get('reason', ''))}"
                )
            elif approval["expired"] and not approval["used_by"]:
                used = "expired unused"
            passes = ", ".join(
                f"{n} {_decimal(parse_fraction_text(p['this_run']))} → "
                f"{_decimal(parse_fraction_text(p['cumulative']))}"
                for n, p in statement["passes"].items()
            )
            quorum = approval["quorum"]
            signed = (
                f"signed by {len(approval['signed_by'])} of {quorum}"
                + (" (quorum)" if approval["agreed"] else " (NO QUORUM: authorizes nothing)")
                if quorum is not None
                else "unsigned (no charter)"
            )
            lines.append(
                f"  approval {approval['approval_id']} at {approval['at'][:19]}: {passes}; "
                f"{signed}; {used}"
            )
            for who in approval["signed_by"]:
                lines.append(f"    signed: {shown(who)}")
            for reason in approval["signatures_not_counted"]:
                lines.append(f"    NOT COUNTED: {shown(reason)}")
            if statement.get("note"):
                lines.append(f"    note: {shown(statement['note'])}")
    if summary["runs_without_dataset"]:
        lines.append("\nruns stopped before their records were bound to a dataset:")
        for run in summary["runs_without_dataset"]:
            lines.append(f"  run {run['run_id']} {run['product']}: {run['outcome']}")
            if run["refused"]:
                lines.append(f"    refused: {shown(run['refused'], 300)}")
    return "\n".join(lines)


def _show(args: argparse.Namespace) -> int:
    ledger = _ledger(args)
    summary = ledger_summary(ledger, args.dataset)
    print(json.dumps(summary, allow_nan=False) if args.json else _render(summary))
    return EXIT_OK


def _witnessed(ledger: Any, info: Any) -> dict[str, Any]:
    """The Prefect server's heads of this ledger, checked (:mod:`tasks.ledger_witness`)."""
    try:
        from tasks.ledger_witness import witnessed_problems

        problems, others, heads = witnessed_problems(ledger, info)
    except Exception as exc:  # the server is unreachable or refuses us: say so, fail closed
        where = os.environ.get("PREFECT_API_URL") or "the local temporary Prefect server"
        reason = (str(exc).splitlines() or [""])[0]
        return {"checked": False, "reason": f"{where}: {type(exc).__name__}: {reason}"}
    return {"checked": True, "heads": heads, "problems": problems, "other_ledgers_here": others}


def _verify(args: argparse.Namespace) -> int:
    from das.runs.faults import EXIT_INFRASTRUCTURE
    from das.trust import printable, release_problems

    ledger = _ledger(args)
    info = ledger.info()
    chain = ledger.charter_chain()
    result: dict[str, Any] = {
        "ledger": info.location,
        "ledger_id": info.ledger_id,
        "head": info.head(),
        "chain": ledger.verify(),
        "charter": _charter_json(chain),
        "prefect": None if args.no_prefect else _witnessed(ledger, info),
        "releases": {str(r): release_problems(ledger, info, r) for r in args.release},
    }
    witness = result["prefect"] or {}
    ok = (
        not result["chain"] and not witness.get("problems") and not any(result["releases"].values())
    )
    result["ok"] = ok
    if args.json:
        print(json.dumps(result))
    else:
        _say(printable(
            f"privacy ledger {info.ledger_id} at {info.location}: {info.head_seq} entries, chain "
            + ("intact" if not result["chain"] else "BROKEN")
        ))  # fmt: skip
        for problem in result["chain"]:
            _say(printable(f"  - {problem}"))  # kinds, run ids: the database's text
        if chain.in_force is not None:
            _say(f"charter version {chain.in_force.version} in force "
                 f"({chain.in_force.digest[:16]}; {chain.in_force.quorum} of "
                 f"{len(chain.in_force.approvers)} approvers)")  # fmt: skip
        elif chain.chartered:
            _say("charter proposed, not in force (no quorum of signatures)")
        else:
            _say("no charter: not a production ledger")
        if result["prefect"] is None:
            _say("Prefect server: not asked (--no-prefect): a ledger cut back or restored from "
                 "an old copy is not detected without it")  # fmt: skip
        elif not witness["checked"]:
            _say(f"Prefect server: COULD NOT BE ASKED: {witness['reason']}")
        else:
            verdict = "not the ledger the Prefect server saw" if witness["problems"] else (
                f"the ledger holds all {witness['heads']} head(s) it recorded")  # fmt: skip
            where = os.environ.get("PREFECT_API_URL") or "the local temporary server"
            _say(f"Prefect server ({where}): {verdict}")
            for problem in witness["problems"]:
                _say(printable(f"  - {problem}"))
            if witness["other_ledgers_here"]:
                _say("  note: the server saw other ledgers at this location before: "
                     + ", ".join(witness["other_ledgers_here"]))  # fmt: skip
        for release, problems in result["releases"].items():
            verdict = "as recorded" if not problems else "DOES NOT MATCH"
            _say(printable(f"release {release}: {verdict}"))
            for problem in problems:
                _say(printable(f"  - {problem}"))  # names of the release's files, escaped
    if ok and result["prefect"] is not None and not witness["checked"]:
        return EXIT_INFRASTRUCTURE
    return EXIT_OK if ok else EXIT_PROBLEMS


def _trust_root(args: argparse.Namespace) -> int:
    """Write the ledger's trust root (:mod:`das.trust.root`) to a new file; its SHA-256 on
    stdout in ``sha256sum``'s form, what to do with both on stderr."""
    import hashlib

    from das.io.atomic import atomic_create_bytes
    from das.trust import root_document

    ledger = _ledger(args)
    info = ledger.require_intact()
    chain = ledger.charter_chain()
    if chain.in_force is None:
        raise ValueError(
            f"privacy ledger {info.ledger_id} has no charter in force: only a production "
            "ledger has a trust root (das ledger init --approvers FILE --quorum K --key KEY, "
            "then each approver: das ledger charter sign)"
        )
    data = root_document(chain.chain)
    try:
        atomic_create_bytes(args.output, data)
    except FileExistsError:
        raise ValueError(
            f"{args.output} exists already: a trust root is never overwritten (verifiers may "
            "have pinned it); write the new one to another file"
        ) from None
    print(f"{hashlib.sha256(data).hexdigest()}  {args.output.name}", flush=True)
    pending = chain.pending
    print(
        f"trust root of privacy ledger {info.ledger_id}: charter versions 1 to "
        f"{chain.in_force.version} (in force)"
        + (f"; charter {pending.digest[:16]} is pending and not in it" if pending else "")
        + f". Publish {args.output.name} and the line above beside the releases: a verifier "
        f"checks it (sha256sum -c) and pins it (das release verify OUT --trust-root "
        f"{args.output.name}); a holder of an earlier root checks this one with das release "
        "check-root",
        file=sys.stderr,
    )
    return EXIT_OK
