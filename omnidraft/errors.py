"""User-facing errors: the CLI prints these as one line and exits non-zero."""


class OmniDraftError(Exception):
    """A problem the user can fix (bad input, missing file, ...). Never a bug."""
