package testenv

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestMinIO starts a server, stores, reads and deletes an object, and
// restarts the server on the same port with its data intact.
func TestMinIO(t *testing.T) {
	m := StartMinIO(t)
	if !strings.HasPrefix(m.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("Endpoint %q not on 127.0.0.1", m.Endpoint)
	}
	env := m.Env()
	for _, want := range []string{"AWS_ACCESS_KEY_ID=" + m.AccessKey, "AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_EC2_METADATA_DISABLED=true"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env() lacks %q", want)
		}
	}
	m.CreateBucket(t, "data")
	m.Put(t, "data", "dir/a b.jpg", []byte("hello"))
	get := func() (string, error) {
		out, err := m.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/a b.jpg")})
		if err != nil {
			return "", err
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		return string(b), err
	}
	if got, err := get(); err != nil || got != "hello" {
		t.Fatalf("get = %q, %v", got, err)
	}
	endpoint := m.Endpoint
	m.Stop(t)
	if _, err := get(); err == nil {
		t.Fatal("get succeeded while MinIO was stopped")
	}
	m.Start(t)
	if m.Endpoint != endpoint {
		t.Fatalf("endpoint changed across restart: %s -> %s", endpoint, m.Endpoint)
	}
	if got, err := get(); err != nil || got != "hello" {
		t.Fatalf("get after restart = %q, %v", got, err)
	}
	m.Delete(t, "data", "dir/a b.jpg")
	if _, err := get(); err == nil {
		t.Fatal("get succeeded after Delete")
	}
}
