package migrations

import "github.com/pressly/goose/v3"

// Provider is the goose provider underneath, for the test that steps
// through the migrations one at a time.
func (m *Migrator) Provider() *goose.Provider { return m.provider }
