package migrations

import "context"

// UpTo applies the migrations up to version, for tests of one migration
// on the rows of the ones before.
func (m *Migrator) UpTo(ctx context.Context, version int64) error {
	_, err := m.provider.UpTo(ctx, version)
	return err
}

// DownTo rolls back the migrations after version.
func (m *Migrator) DownTo(ctx context.Context, version int64) error {
	_, err := m.provider.DownTo(ctx, version)
	return err
}
