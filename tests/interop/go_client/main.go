// A client of the Go library (twitchscience/kinsumer) for the interop tier (tests/interop): one
// Kinsumer on the given application, reading through Next() and printing each record's data on a
// line of its own on stdout (written at once, unbuffered), so that a test counts what it delivered
// as it goes. Its own messages go to stderr.
//
// -records N: after N records it calls Stop() and exits (-after stop, the default), or stops
// calling Next() and waits for a signal (-after hold: the test then kills it having read exactly N).
// -records 0: it reads until SIGTERM or SIGINT. SIGTERM and SIGINT always end in a clean Stop()
// (the shards released, the client row deleted) and exit 0.
//
// The durations are the Go library's Config (throttle delay, commit, shard check and leader action
// frequencies): a Go client's row counts as live for 5 x -shard-check after its last heartbeat.
// Built by scripts/benchlib/go_contender.py in GOPATH mode, against the Debian packages of the
// library's dependencies; never committed as a binary.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/aws/aws-sdk-go/aws"
	"github.com/aws/aws-sdk-go/aws/credentials"
	"github.com/aws/aws-sdk-go/aws/session"
	"github.com/aws/aws-sdk-go/service/dynamodb"
	"github.com/aws/aws-sdk-go/service/kinesis"
	"github.com/twitchscience/kinsumer"
)

func main() {
	kinesisURL := flag.String("kinesis", "", "Kinesis endpoint (http://127.0.0.1:PORT)")
	dynamoURL := flag.String("dynamodb", "", "DynamoDB endpoint (http://127.0.0.1:PORT)")
	stream := flag.String("stream", "", "stream name")
	app := flag.String("app", "", "application name (its tables: <app>_clients, _checkpoints, _metadata)")
	name := flag.String("name", "go-client", "client name (the Name of its client row)")
	records := flag.Int("records", 0, "records to read before -after; 0: until SIGTERM or SIGINT")
	after := flag.String("after", "stop", "after -records: stop (a clean Stop(), then exit) or hold (wait for a signal)")
	createTables := flag.Bool("create-tables", true, "CreateRequiredTables() first (nothing if they exist)")
	throttle := flag.Duration("throttle", 0, "Config throttleDelay (at least 200ms); 0: the library's default")
	commit := flag.Duration("commit", 0, "Config commitFrequency; 0: the library's default")
	shardCheck := flag.Duration("shard-check", 0, "Config shardCheckFrequency; 0: the library's default")
	leader := flag.Duration("leader", 0, "Config leaderActionFrequency; 0: the library's default")
	flag.Parse()
	log.SetPrefix("go-client " + *name + ": ")
	if *after != "stop" && *after != "hold" {
		log.Fatalf("-after must be stop or hold, not %q", *after)
	}

	config := kinsumer.NewConfig()
	if *throttle > 0 {
		config = config.WithThrottleDelay(*throttle)
	}
	if *commit > 0 {
		config = config.WithCommitFrequency(*commit)
	}
	if *shardCheck > 0 {
		config = config.WithShardCheckFrequency(*shardCheck)
	}
	if *leader > 0 {
		config = config.WithLeaderActionFrequency(*leader)
	}

	// fixed fake credentials: only the local servers are ever reached
	sess := session.Must(session.NewSession(aws.NewConfig().
		WithRegion("us-east-1").
		WithCredentials(credentials.NewStaticCredentials("local", "local", ""))))
	kc := kinesis.New(sess, aws.NewConfig().WithEndpoint(*kinesisURL))
	dc := dynamodb.New(sess, aws.NewConfig().WithEndpoint(*dynamoURL))
	k, err := kinsumer.NewWithInterfaces(kc, dc, *stream, *app, *name, config)
	if err != nil {
		log.Fatalf("NewWithInterfaces: %v", err)
	}
	if *createTables {
		if err := k.CreateRequiredTables(); err != nil {
			log.Fatalf("CreateRequiredTables: %v", err)
		}
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	if err := k.Run(); err != nil {
		log.Fatalf("Run: %v", err)
	}
	log.Printf("running")

	reached := make(chan struct{}) // closed once -records were read, or when Next() says the client stopped
	delivered := 0
	go func() {
		defer close(reached)
		for *records == 0 || delivered < *records {
			data, err := k.Next()
			if err != nil { // the library's background errors come through Next(); it goes on
				log.Printf("Next: %v", err)
				continue
			}
			if data == nil { // Stop() was called
				return
			}
			if _, err := os.Stdout.Write(append(data, '\n')); err != nil {
				log.Fatalf("stdout: %v", err)
			}
			delivered++
		}
	}()

	select {
	case <-reached:
		if *after == "hold" {
			log.Printf("read %d records; holding until a signal", *records)
			log.Printf("%v: stopping", <-signals)
		}
	case got := <-signals:
		log.Printf("%v: stopping", got)
	}
	k.Stop()
	<-reached // Next() returns nil once Stop() closed the output
	log.Printf("stopped cleanly after %d records", delivered)
}
