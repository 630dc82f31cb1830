// Package plugins holds agrun's test plug-ins, written with Extism's Go
// PDK (count_vowels/, hostile/; built by scripts/build-examples.sh into
// NAME.wasm beside them), and the Extism half of the differential test.
// It is a module of its own so that Extism's SDK and PDK never enter
// agrun's go.mod.
package plugins
