package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/payorch/payorch/orchestrator"
)

func cmdTenants(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"tenants: want create, list or origins"}
	}
	fs := newFlagSet("tenants " + args[0])
	asJSON := fs.Bool("json", false, "print JSON")
	name := fs.String("name", "", "tenant name")
	tenant := fs.Int64("tenant", 0, "tenant id (origins)")
	set := fs.String("set", "", "origins: the browser origins to allow, comma-separated (\"\" for none)")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("tenants %s: unexpected argument %q", args[0], fs.Arg(0))}
	}
	if args[0] == "create" && *name == "" {
		return usageError{"tenants create: --name is required"}
	}
	if args[0] == "origins" && *tenant <= 0 {
		return usageError{"tenants origins: --tenant is required"}
	}
	pool, err := openPool(ctx, cfg, cfg.DatabaseURL, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Logger: newLogger(cfg)})

	switch args[0] {
	case "create":
		t, k, secret, err := svc.CreateTenant(ctx, *name)
		if err != nil {
			return cliError(err)
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"tenant_id": t.ID, "name": t.Name, "api_key": secret, "api_key_id": k.ID})
		}
		fmt.Fprintf(stdout, "tenant %d %q created\nmerchant API key (shown once): %s\n", t.ID, t.Name, secret)
		return nil
	case "list":
		ts, err := svc.ListTenants(ctx)
		if err != nil {
			return cliError(err)
		}
		if *asJSON {
			if ts == nil {
				ts = []orchestrator.Tenant{}
			}
			return printJSON(stdout, ts)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCREATED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"))
		}
		return tw.Flush()
	case "origins":
		var origins *[]string
		if flagSet(fs, "set") {
			list := splitList(*set)
			origins = &list
		}
		return tenantOrigins(ctx, svc, *tenant, origins, cfg.Environment != envProduction, *asJSON, stdout)
	}
	return usageError{fmt.Sprintf("tenants: unknown subcommand %q", args[0])}
}

// tenantOrigins prints tenant's browser origins, after replacing them with
// *set when set is not nil (http://loopback origins only when
// allowLoopbackHTTP: outside production).
func tenantOrigins(ctx context.Context, svc *orchestrator.Service, tenant int64, set *[]string, allowLoopbackHTTP, asJSON bool,
	stdout io.Writer) error {
	var (
		origins []string
		err     error
	)
	if set != nil {
		origins, err = svc.SetBrowserOrigins(ctx, tenant, *set, allowLoopbackHTTP)
	} else {
		origins, err = svc.BrowserOrigins(ctx, tenant)
	}
	if err != nil {
		return cliError(err)
	}
	if asJSON {
		return printJSON(stdout, map[string]any{"tenant_id": tenant, "origins": origins})
	}
	if len(origins) == 0 {
		fmt.Fprintf(stdout, "tenant %d allows no browser origin\n", tenant)
		return nil
	}
	fmt.Fprintf(stdout, "tenant %d allows browsers from:\n", tenant)
	for _, o := range origins {
		fmt.Fprintf(stdout, "  %s\n", o)
	}
	return nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// splitList splits a comma-separated list, dropping blanks around and
// between items.
func splitList(s string) []string {
	out := []string{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func cmdAPIKeys(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"apikeys: want create, list or revoke"}
	}
	sub := args[0]
	fs := newFlagSet("apikeys " + sub)
	asJSON := fs.Bool("json", false, "print JSON")
	role := fs.String("role", "", "merchant, support, finance, admin or publishable")
	tenant := fs.Int64("tenant", 0, "tenant id (merchant and publishable keys)")
	desc := fs.String("description", "", "what the key is for")
	// Allow `apikeys revoke KEY_ID --json` as well as flags first.
	rest := args[1:]
	var positional []string
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch {
	case sub == "create" && (*role == "" || len(positional) > 0):
		return usageError{"apikeys create: --role is required and nothing else is positional"}
	case sub == "revoke" && len(positional) != 1:
		return usageError{"apikeys revoke: want exactly one KEY_ID"}
	case sub == "list" && len(positional) > 0:
		return usageError{"apikeys list: unexpected argument"}
	}
	pool, err := openPool(ctx, cfg, cfg.DatabaseURL, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	svc := orchestrator.NewService(orchestrator.Config{Pool: pool, Logger: newLogger(cfg)})

	switch sub {
	case "create":
		r, err := orchestrator.ParseRole(*role)
		if err != nil {
			return cliError(err)
		}
		k, secret, err := svc.CreateAPIKey(ctx, r, *tenant, *desc)
		if err != nil {
			return cliError(err)
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"api_key_id": k.ID, "api_key": secret, "role": k.Role, "tenant_id": k.TenantID})
		}
		fmt.Fprintf(stdout, "%s key %s created\nAPI key (shown once): %s\n", k.Role, k.ID, secret)
		return nil
	case "list":
		return listAPIKeys(ctx, svc, *tenant, *asJSON, stdout)
	case "revoke":
		k, err := svc.RevokeAPIKey(ctx, positional[0])
		if err != nil {
			return cliError(err)
		}
		if *asJSON {
			return printJSON(stdout, k)
		}
		fmt.Fprintf(stdout, "key %s revoked at %s\n", k.ID, k.RevokedAt.UTC().Format("2006-01-02 15:04:05Z"))
		return nil
	}
	return usageError{fmt.Sprintf("apikeys: unknown subcommand %q", sub)}
}

// listAPIKeys prints the keys (of tenant, unless 0) as JSON or a table.
func listAPIKeys(ctx context.Context, svc *orchestrator.Service, tenant int64, asJSON bool, stdout io.Writer) error {
	keys, err := svc.ListAPIKeys(ctx, tenant)
	if err != nil {
		return cliError(err)
	}
	if asJSON {
		if keys == nil {
			keys = []orchestrator.APIKey{}
		}
		return printJSON(stdout, keys)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tTENANT\tCREATED\tLAST USED\tREVOKED\tDESCRIPTION")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Role, optInt(k.TenantID),
			k.CreatedAt.UTC().Format("2006-01-02 15:04Z"), optTime(k.LastUsedAt), optTime(k.RevokedAt), k.Description)
	}
	return tw.Flush()
}

// cliError shows an application error's client-safe message; anything else
// as is (the operator is not a remote client).
func cliError(err error) error {
	if e, ok := err.(*orchestrator.Error); ok && e.Code != orchestrator.CodeInternal {
		return fmt.Errorf("%s: %s", e.Code, e.Message)
	}
	return err
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func optTime[T interface{ Format(string) string }](p *T) string {
	if p == nil {
		return "-"
	}
	return (*p).Format("2006-01-02 15:04Z")
}
