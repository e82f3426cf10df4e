// The etcd server: what etcd's own main package (go.etcd.io/etcd/v3) runs.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
