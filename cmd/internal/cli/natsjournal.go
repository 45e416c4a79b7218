package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/skulkrt/skulk/calllog"
	"github.com/skulkrt/skulk/calllog/jetstreamstore"
	"github.com/skulkrt/skulk/calllog/sqlitestore"
)

// journalStore is a journal the CLI opened: a SQLite file or a JetStream
// stream.
type journalStore interface {
	calllog.EventStore
	// ListTrees returns the trees kept, newest first.
	ListTrees(ctx context.Context) ([]calllog.TreeInfo, error)
	// TreeInfo describes one tree; calllog.ErrNoTree when there is none.
	TreeInfo(ctx context.Context, tree string) (calllog.TreeInfo, error)
	Close() error
}

// natsConnectTimeout bounds connecting to the NATS servers of a journal
// URL and opening (or creating) its stream.
const natsConnectTimeout = 15 * time.Second

// natsOptions returns the connection options of the environment, as the
// nats CLI names them: NATS_CREDS, NATS_NKEY (a seed), NATS_CERT and
// NATS_KEY, NATS_CA name files; NATS_USER and NATS_PASSWORD are a user's.
// No secret is taken from the command line, where process lists show it.
func natsOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if f := os.Getenv("NATS_CREDS"); f != "" {
		opts = append(opts, nats.UserCredentials(f))
	}
	if f := os.Getenv("NATS_NKEY"); f != "" {
		o, err := nats.NkeyOptionFromSeed(f)
		if err != nil {
			return nil, statusErr(ExitFailure, "NATS_NKEY: the seed file cannot be read: %v", err)
		}
		opts = append(opts, o)
	}
	cert, key := os.Getenv("NATS_CERT"), os.Getenv("NATS_KEY")
	if (cert == "") != (key == "") {
		return nil, statusErr(ExitFailure, "NATS_CERT and NATS_KEY go together")
	}
	if cert != "" {
		opts = append(opts, nats.ClientCert(cert, key))
	}
	if f := os.Getenv("NATS_CA"); f != "" {
		opts = append(opts, nats.RootCAs(f))
	}
	if u := os.Getenv("NATS_USER"); u != "" {
		opts = append(opts, nats.UserInfo(u, os.Getenv("NATS_PASSWORD")))
	}
	return opts, nil
}

// storeMode says what openStore may do to a journal.
type storeMode int

const (
	// storeCreate opens for writing, creating the file or stream when
	// missing (call --journal).
	storeCreate storeMode = iota
	// storeRead opens for reading only: nothing is created or written
	// (follow, replay, asif export, journal list).
	storeRead
	// storeExisting opens for writing what exists, never creating it
	// (journal takeover, journal prune).
	storeExisting
)

// errNotWritten is openStore's error for a journal that does not exist
// yet (a missing file, a stream not created): follow waits for one.
var errNotWritten = errors.New("no journal written there yet")

// openStore opens the journal named by name: a JetStream store URL
// (nats://HOST:PORT/STREAM) or a SQLite file. A file that is not a Skulk
// journal is refused untouched; a journal that does not exist yet is
// errNotWritten (wrapped in an exit status) unless mode is storeCreate.
func openStore(name string, mode storeMode) (journalStore, error) {
	if !jetstreamstore.IsURL(name) {
		st, err := sqlitestore.Open(name, sqlitestore.Options{ReadOnly: mode == storeRead, MustExist: mode == storeExisting})
		switch {
		case errors.Is(err, sqlitestore.ErrNotWritten):
			return nil, &exitError{status: ExitFailure, msg: fmt.Sprintf("cannot open the journal %s: no such file", name), cause: errNotWritten}
		case errors.Is(err, sqlitestore.ErrNotJournal):
			return nil, statusErr(ExitFailure, "cannot open the journal %s: it is not a Skulk journal (another application's file, left unchanged)", name)
		case errors.Is(err, sqlitestore.ErrFormatVersion):
			return nil, statusErr(ExitFailure, "cannot open the journal %s: it was written in a later format than this skulk-host reads", name)
		case err != nil:
			return nil, statusErr(ExitFailure, "cannot open the journal %s: %v", name, err)
		}
		return st, nil
	}
	opts, err := natsOptions()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsConnectTimeout)
	defer cancel()
	st, err := jetstreamstore.Open(ctx, name, jetstreamstore.Options{Connect: opts, ReadOnly: mode == storeRead, MustExist: mode == storeExisting})
	if errors.Is(err, jetstreamstore.ErrNoStream) {
		return nil, &exitError{status: ExitFailure, msg: "cannot open the journal: no such stream", cause: errNotWritten}
	}
	if err != nil {
		return nil, statusErr(ExitFailure, "cannot open the journal: %v", err)
	}
	return st, nil
}

// latestTree returns the latest tree of st, "" when it has none.
func latestTree(ctx context.Context, st journalStore) (string, error) {
	switch st := st.(type) {
	case *jetstreamstore.Store:
		return st.LatestTree(ctx)
	case *sqlitestore.Store:
		return st.LatestTree(ctx)
	}
	return "", nil
}
