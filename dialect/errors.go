package dialect

import "errors"

// Sentinel errors that every dialect maps its own driver errors onto, so the core
// never inspects a driver error code.
var (
	// ErrLeaseLost means the task is no longer held with the given lease token: its
	// lease expired and it was rescued, or an operator changed it. The caller's
	// result is discarded and nothing was changed.
	ErrLeaseLost = errors.New("lease lost: task is no longer held with this token")

	// ErrNotFound means the named process, task or worker does not exist.
	ErrNotFound = errors.New("not found")

	// ErrInvalid means the database refused the input as invalid (a CHECK constraint
	// or a validation inside a stored routine).
	ErrInvalid = errors.New("invalid input")

	// ErrUnknownScheme means no dialect is registered for the DSN's scheme.
	ErrUnknownScheme = errors.New("unknown DSN scheme")
)
