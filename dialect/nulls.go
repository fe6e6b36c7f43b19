package dialect

import "database/sql"

// NullInt passes an optional int as a statement parameter: nil is NULL.
func NullInt(v *int) sql.NullInt64 {
	if v == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*v), Valid: true}
}

// IntOrNil reads an optional int column: nil where it was NULL (the inverse of
// NullInt).
func IntOrNil(v sql.NullInt64) *int {
	if !v.Valid {
		return nil
	}
	i := int(v.Int64)
	return &i
}

// NullString passes a string as a statement parameter, the empty string as NULL.
func NullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
