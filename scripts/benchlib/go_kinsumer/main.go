// The Go kinsumer (twitchscience/kinsumer) as a benchmark contender: one client reads a
// pre-filled stream through Next() from Run() to its last record, taking each payload, and
// prints {"records", "seconds", "cpu", "startup"} as JSON (cpu: CPU-seconds of this process
// over the same span). Built by scripts/benchlib/go_contender.py in GOPATH mode against the
// Debian packages of its dependencies (golang-github-aws-aws-sdk-go-dev, ...-google-uuid-dev,
// golang-golang-x-sync-dev).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go/aws"
	"github.com/aws/aws-sdk-go/aws/session"
	"github.com/aws/aws-sdk-go/service/dynamodb"
	"github.com/aws/aws-sdk-go/service/kinesis"
	"github.com/twitchscience/kinsumer"
)

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		log.Fatal(err)
	}
	return float64(usage.Utime.Sec+usage.Stime.Sec) + float64(usage.Utime.Usec+usage.Stime.Usec)/1e6
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	kinesisURL := flag.String("kinesis", "", "Kinesis endpoint")
	dynamoURL := flag.String("dynamodb", "", "DynamoDB endpoint")
	stream := flag.String("stream", "", "stream name")
	app := flag.String("app", "", "application name")
	total := flag.Int("records", 0, "records to read")
	flag.Parse()

	sess := session.Must(session.NewSession(aws.NewConfig().WithRegion("us-east-1")))
	kc := kinesis.New(sess, aws.NewConfig().WithEndpoint(*kinesisURL))
	dc := dynamodb.New(sess, aws.NewConfig().WithEndpoint(*dynamoURL))
	k, err := kinsumer.NewWithInterfaces(kc, dc, *stream, *app, "bench", kinsumer.NewConfig())
	must(err)
	must(k.CreateRequiredTables())

	started, cpu := time.Now(), cpuSeconds()
	must(k.Run())
	first := -1.0
	sink := 0
	for i := 0; i < *total; i++ {
		data, err := k.Next()
		must(err)
		if data == nil {
			log.Fatalf("the consumer stopped after %d of %d records", i, *total)
		}
		sink += len(data)
		if first < 0 {
			first = time.Since(started).Seconds()
		}
	}
	elapsed, used := time.Since(started).Seconds(), cpuSeconds()-cpu
	k.Stop()
	must(k.DeleteTables())
	out, _ := json.Marshal(map[string]interface{}{
		"records": *total, "seconds": elapsed, "cpu": used, "startup": first, "bytes": sink,
	})
	fmt.Println(string(out))
}
