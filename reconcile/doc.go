// Package reconcile will hold the daily reconciliation job: reading each
// provider's record of a day, matching it against the payments table, and
// recording versioned runs and their discrepancies for finance.
package reconcile
