// Command wordcount is a small tool in the shape of the guest ABI: a JSON
// object on stdin, a JSON result on stdout. Benchmarks use it as the
// typical Go guest.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func main() {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Printf("{\"error\":%q}\n", err.Error())
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]int{"words": len(strings.Fields(in.Text))})
}

// agrunCall makes wordcount a reactor when it is built with
// -buildmode=c-shared (BenchmarkRunSnapshot): each call runs main.
//
//go:wasmexport agrun_call
func agrunCall() { main() }
