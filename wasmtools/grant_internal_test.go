package wasmtools

import (
	"reflect"
	"testing"

	"github.com/agcore/agrun/runtime"
)

// TestGrantCarriesTheNetworkGrant checks that every field of
// runtime.NetworkGrant is in Grant under the same name and type, and that
// the sandbox gets it: a field added to the runtime's network grant cannot
// be forgotten here.
func TestGrantCarriesTheNetworkGrant(t *testing.T) {
	var g Grant
	gv := reflect.ValueOf(&g).Elem()
	want := reflect.ValueOf(&runtime.NetworkGrant{}).Elem()
	nt := want.Type()
	for i := range nt.NumField() {
		f := nt.Field(i)
		gf, ok := reflect.TypeOf(g).FieldByName(f.Name)
		if !ok || gf.Type != f.Type {
			t.Fatalf("Grant has no field %s %s (runtime.NetworkGrant has it)", f.Name, f.Type)
		}
		// A non-zero value for each field, set on both sides.
		var v reflect.Value
		switch f.Type.Kind() {
		case reflect.Slice:
			v = reflect.ValueOf([]string{"example.com:" + f.Name})
		case reflect.Bool:
			v = reflect.ValueOf(true)
		case reflect.Int, reflect.Int64:
			v = reflect.New(f.Type).Elem()
			v.SetInt(int64(100 + i))
		default:
			t.Fatalf("field %s: type %s not covered by this test", f.Name, f.Type)
		}
		gv.FieldByIndex(gf.Index).Set(v)
		want.Field(i).Set(v)
	}
	if got := g.network(); !reflect.DeepEqual(*got, want.Interface()) {
		t.Fatalf("network() = %+v, want %+v", *got, want.Interface())
	}
}
