"""The project's own error for bad input."""


class InputError(ValueError):
    """A malformed file, field, flag or dataset; the message names the file (or flag), the field and
    what was expected. A ValueError, so callers that caught ValueError keep working."""
