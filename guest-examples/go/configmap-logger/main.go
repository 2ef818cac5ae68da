// configmap-logger: the kubewasm reference handler in Go (a wasip1 reactor made a component with
// the WASI preview1 reactor adapter; see README.md for the build and why it is built this way).
//
// There is no Go bindings generator usable here, so the canonical ABI of the kubewasm:handler world
// is written by hand below (wasm32 layouts, checked against the C bindings wit-bindgen generates).
// Two rules keep the Go runtime sound inside a component:
//   - The garbage collector never runs inside cabi_realloc: the host calls cabi_realloc while it
//     lowers arguments, the GC reads the clock through a WASI import, and imports are forbidden
//     there ("cannot leave component instance"). So automatic GC is off (SetGCPercent(-1), no
//     memory limit) and enter() collects at the start of an export, where imports are allowed,
//     once 4 MiB were allocated. Blocks from cabi_realloc stay referenced until post-return.
//
// The label `kubewasm.io/bench` (tests/benches/languages.rs) skips the logging: `noop` returns at
// once, `parse` decodes the object(s) with encoding/json into map[string]any and returns.
//   - The WASI adapter gets its memory from adapterArena (below), never from Go or memory.grow.
package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"unsafe"
)

func main() {}

func init() {
	debug.SetGCPercent(-1)
	adapterArenaRef = &adapterArena[0]
}

// Memory for the WASI preview1 adapter (its state and its 64 KiB stack). The adapter must not get
// memory from Go (it would re-enter the Go runtime from inside a WASI call) nor by memory.grow (Go's
// sbrk assumes it owns every page above its heap). `kubewasm-guest-tool go-adapter-arena` finds this
// array by its header in the data segments and injects a `cabi_realloc_adapter` bump allocator over
// it, written in plain wasm. Go never touches the array after the header.
const adapterArenaSize = 256 << 10

var adapterArena = [adapterArenaSize]byte{
	'k', 'u', 'b', 'e', 'w', 'a', 's', 'm', '-', 'a', 'd', 'a', 'p', 't', 'e', 'r',
	adapterArenaSize & 0xff, adapterArenaSize >> 8 & 0xff, adapterArenaSize >> 16 & 0xff, adapterArenaSize >> 24 & 0xff,
}
var adapterArenaRef *byte

// ---- memory for the host --------------------------------------------------------------------

// Blocks handed to the host by cabi_realloc for the current call, kept alive until post-return.
var pending [][]byte

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	if newSize == 0 {
		return unsafe.Pointer(uintptr(align))
	}
	// Over-allocate so the block can be aligned; Go's allocator gives 8-byte alignment anyway.
	buf := make([]byte, newSize+align)
	pending = append(pending, buf)
	p := uintptr(unsafe.Pointer(&buf[0]))
	p = (p + uintptr(align) - 1) &^ (uintptr(align) - 1)
	if old != nil && oldSize > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(p)), newSize), unsafe.Slice((*byte)(old), oldSize))
	}
	return unsafe.Pointer(p)
}

const gcEvery = 4 << 20

var heapSample = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
var allocsAtLastGC uint64

// enter runs at the start of every export: a safe point for a collection.
func enter() {
	metrics.Read(heapSample)
	if a := heapSample[0].Value.Uint64(); a-allocsAtLastGC > gcEvery {
		runtime.GC()
		allocsAtLastGC = a
	}
}

// Results of the current call, kept alive until post-return.
var keep []any

func postReturn() {
	pending = pending[:0]
	keep = keep[:0]
}

// ---- canonical ABI values -------------------------------------------------------------------

type wstring struct {
	ptr uint32
	len uint32
}

func (s wstring) String() string {
	if s.len == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(uintptr(s.ptr))), s.len)
}

func lower(s string) wstring {
	b := []byte(s)
	keep = append(keep, b)
	if len(b) == 0 {
		return wstring{1, 0}
	}
	return wstring{uint32(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))}
}

func at[T any](base unsafe.Pointer, off uintptr) *T { return (*T)(unsafe.Add(base, off)) }

// object-meta (size 80, align 8): api-version@0 kind@8 namespace@16(disc u8, string@20)
// name@28 uid@36 resource-version@44 generation@56(disc u8, s64@64) labels@72.
// object (size 88): meta@0 json@80.
type objectMeta struct {
	namespace       *string
	name            string
	resourceVersion string
	labels          [][2]string
	json            wstring // not lifted: only `parse` mode reads it, in place
}

func liftObject(p unsafe.Pointer) objectMeta {
	var m objectMeta
	if *at[uint8](p, 16) != 0 {
		ns := at[wstring](p, 20).String()
		m.namespace = &ns
	}
	m.name = at[wstring](p, 28).String()
	m.resourceVersion = at[wstring](p, 44).String()
	m.json = *at[wstring](p, 80)
	l := at[wstring](p, 72) // list: ptr, len of tuple<string,string> (16 bytes each)
	for i := uint32(0); i < l.len; i++ {
		t := unsafe.Pointer(uintptr(l.ptr) + uintptr(i)*16)
		m.labels = append(m.labels, [2]string{at[wstring](t, 0).String(), at[wstring](t, 8).String()})
	}
	return m
}

//go:wasmimport kubewasm:handler/log@0.1.0 log
func hostLog(level uint32, ptr unsafe.Pointer, length uint32)

const levelInfo = 2

func logInfo(msg string) {
	b := []byte(msg)
	if len(b) == 0 {
		hostLog(levelInfo, nil, 0)
		return
	}
	hostLog(levelInfo, unsafe.Pointer(&b[0]), uint32(len(b)))
	runtime.KeepAlive(b)
}

// result<_, handler-error> return area (size 16): disc u8@0, handler-error@4 (case u8@4, string@8).
var retArea [4]uint32

func result(err *handlerError) unsafe.Pointer {
	retArea = [4]uint32{}
	if err != nil {
		s := lower(err.msg)
		retArea[0] = 1
		retArea[1] = err.tag
		retArea[2] = s.ptr
		retArea[3] = s.len
	}
	return unsafe.Pointer(&retArea)
}

// ---- the handler ----------------------------------------------------------------------------

const failLabel = "kubewasm.io/fail"

type handlerError struct {
	tag uint32 // 0 retry, 1 fatal
	msg string
}

func key(m objectMeta) string {
	if m.namespace != nil {
		return *m.namespace + "/" + m.name
	}
	return m.name
}

const benchLabel = "kubewasm.io/bench"

// bench handles the bench label of m (the new object for on-update); done reports whether the call
// was a benchmark call, err is then its result. objs are the objects whose JSON `parse` decodes.
func bench(m objectMeta, objs ...objectMeta) (done bool, err *handlerError) {
	mode := ""
	for _, kv := range m.labels {
		if kv[0] == benchLabel {
			mode = kv[1]
		}
	}
	switch mode {
	case "noop":
		return true, nil
	case "parse":
		for _, o := range objs {
			var v map[string]any
			// In place: the bytes live in a cabi_realloc block, referenced until post-return.
			var b []byte
			if o.json.len > 0 {
				b = unsafe.Slice((*byte)(unsafe.Pointer(uintptr(o.json.ptr))), o.json.len)
			}
			if e := json.Unmarshal(b, &v); e != nil {
				return true, &handlerError{1, "invalid JSON: " + e.Error()}
			}
		}
		return true, nil
	}
	return false, nil
}

func outcome(m objectMeta) *handlerError {
	for _, kv := range m.labels {
		if kv[0] != failLabel {
			continue
		}
		switch kv[1] {
		case "retry":
			return &handlerError{0, failLabel + "=retry"}
		case "fatal":
			return &handlerError{1, failLabel + "=fatal"}
		case "trap":
			panic(failLabel + "=trap") // an unrecovered panic traps the instance
		}
		return nil
	}
	return nil
}

// plugin-info (size 16): name@0 subscriptions@8. subscription (size 64, align 8):
// api-version@0 kind@8 namespace@16 label-selector@28 field-selector@40 (option<string>: disc u8,
// string@+4) resync-period-ms@56.
var describeArea [4]uint32

//go:wasmexport describe
func describe() unsafe.Pointer {
	enter()
	sub := make([]uint64, 8) // 64 bytes, 8-aligned, zeroed: all options none, resync 0
	keep = append(keep, sub)
	sp := unsafe.Pointer(&sub[0])
	*at[wstring](sp, 0) = lower("v1")
	*at[wstring](sp, 8) = lower("ConfigMap")
	name := lower("configmap-logger")
	describeArea = [4]uint32{name.ptr, name.len, uint32(uintptr(sp)), 1}
	return unsafe.Pointer(&describeArea)
}

//go:wasmexport cabi_post_describe
func postDescribe(unsafe.Pointer) { postReturn() }

//go:wasmexport on-add
func onAdd(args unsafe.Pointer) unsafe.Pointer {
	enter()
	m := liftObject(args)
	if done, err := bench(m, m); done {
		return result(err)
	}
	logInfo(fmt.Sprintf("add %s rv=%s init=%t", key(m), m.resourceVersion, *at[uint8](args, 88) != 0))
	return result(outcome(m))
}

//go:wasmexport cabi_post_on-add
func postOnAdd(unsafe.Pointer) { postReturn() }

//go:wasmexport on-update
func onUpdate(args unsafe.Pointer) unsafe.Pointer {
	enter()
	old := liftObject(args)
	m := liftObject(unsafe.Add(args, 88))
	if done, err := bench(m, old, m); done {
		return result(err)
	}
	logInfo(fmt.Sprintf("update %s rv=%s->%s sync=%t", key(m), old.resourceVersion, m.resourceVersion,
		*at[uint8](args, 176) != 0))
	return result(outcome(m))
}

//go:wasmexport cabi_post_on-update
func postOnUpdate(unsafe.Pointer) { postReturn() }

//go:wasmexport on-delete
func onDelete(args unsafe.Pointer) unsafe.Pointer {
	enter()
	m := liftObject(args)
	if done, err := bench(m, m); done {
		return result(err)
	}
	logInfo(fmt.Sprintf("delete %s rv=%s final-state-unknown=%t", key(m), m.resourceVersion,
		*at[uint8](args, 88) != 0))
	return result(outcome(m))
}

//go:wasmexport cabi_post_on-delete
func postOnDelete(unsafe.Pointer) { postReturn() }
