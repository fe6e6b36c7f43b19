package dialect

import "database/sql"

// NullInt passes an optional int as a statement parameter: nil is NULL.
func NullInt(v *int) sql.NullInt64 {
	if v == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*v), Valid: true}
}

// NullString passes a string as a statement parameter, the empty string as NULL.
func NullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
