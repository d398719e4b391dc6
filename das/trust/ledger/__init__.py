"""The privacy ledger: the system of record of runs, approvals, spends and draws (names reach
the rest of the code through :mod:`das.trust`; :mod:`~das.trust.ledger.ledger` says which
module holds which rule)."""
