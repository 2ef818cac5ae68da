// {{name}}: a kubewasm handler (world kubewasm:handler@0.2.0) for {{api-version}} {{kind}}.
//
// Logs every call with the object's key and records a Normal Event `Observed` about each object it
// sees added (the one act it needs a grant for: `events = true` in {{name}}.toml).
//
// Go has no usable WIT bindings generator here, so the canonical ABI of the parts of the world this
// handler uses (log, events.emit, the five exports) is written by hand below, with the wasm32
// layouts of the WIT types (check a new one against `kubewasm-guest-tool bindgen wit /tmp/b`,
// /tmp/b/handler.c). Three rules keep the Go runtime sound inside a component:
//   - The garbage collector never runs inside cabi_realloc (the host calls it while lowering
//     arguments, the GC reads the clock through a WASI import, and imports are forbidden there):
//     automatic GC is off and enter() collects at the start of an export once 4 MiB were allocated.
//     Blocks from cabi_realloc stay referenced until post-return.
//   - The WASI adapter gets its memory from adapterArena, never from Go or memory.grow.
//   - No goroutines that outlive a call, no timers, no time.Sleep.
package main

import (
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

// ---- the handler ----------------------------------------------------------------------------

func describeHandler() pluginInfo {
	return pluginInfo{
		name:          "{{name}}",
		subscriptions: []subscription{{apiVersion: "{{api-version}}", kind: "{{kind}}"}},
		// Asks for the `events` grant; without it the plugin is not loaded.
		events: true,
	}
}

// Returning nil is `ok`; &handlerError{tagRetry, "why"} asks for a redelivery with backoff.
func onAddHandler(obj *objectMeta, isInInitialList bool) *handlerError {
	k := key(obj)
	logInfo(fmt.Sprintf("add %s init=%t", k, isInInitialList))
	emitEvent(obj, eventNormal, "Observed", "Observe", "{{name}} saw "+k)
	return nil
}

func onUpdateHandler(old, new *objectMeta, isSync bool) *handlerError {
	logInfo(fmt.Sprintf("update %s sync=%t", key(new), isSync))
	return nil
}

func onDeleteHandler(obj *objectMeta, finalStateUnknown bool) *handlerError {
	logInfo(fmt.Sprintf("delete %s final-state-unknown=%t", key(obj), finalStateUnknown))
	return nil
}

func onSyncedHandler() *handlerError {
	logInfo("synced")
	return nil
}

// key is `namespace/name`, or `name` for cluster-scoped objects.
func key(m *objectMeta) string {
	if m.namespace != nil {
		return *m.namespace + "/" + m.name
	}
	return m.name
}

// ---- memory for the WASI adapter and the host ------------------------------------------------

// Memory for the WASI preview1 adapter (its state and its 64 KiB stack). The adapter must not get
// memory from Go (it would re-enter the Go runtime from inside a WASI call) nor by memory.grow (Go's
// sbrk assumes it owns every page above its heap). `kubewasm-guest-tool go-adapter-arena` finds this
// array by its header in the data segments and injects a `cabi_realloc_adapter` bump allocator over
// it. Go never touches the array after the header.
const adapterArenaSize = 256 << 10

var adapterArena = [adapterArenaSize]byte{
	'k', 'u', 'b', 'e', 'w', 'a', 's', 'm', '-', 'a', 'd', 'a', 'p', 't', 'e', 'r',
	adapterArenaSize & 0xff, adapterArenaSize >> 8 & 0xff, adapterArenaSize >> 16 & 0xff, adapterArenaSize >> 24 & 0xff,
}
var adapterArenaRef *byte

// Blocks handed to the host by cabi_realloc for the current call, kept alive until post-return.
var pending [][]byte

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	if newSize == 0 {
		return unsafe.Pointer(uintptr(align))
	}
	// Over-allocate so the block can be aligned.
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

// lower places s in memory kept alive until post-return.
func lower(s string) wstring {
	b := []byte(s)
	keep = append(keep, b)
	if len(b) == 0 {
		return wstring{1, 0}
	}
	return wstring{uint32(uintptr(unsafe.Pointer(&b[0]))), uint32(len(b))}
}

func at[T any](base unsafe.Pointer, off uintptr) *T { return (*T)(unsafe.Add(base, off)) }

// object-meta (size 80, align 8): api-version@0 kind@8 namespace@16 (disc u8, string@20) name@28
// uid@36 resource-version@44 generation@56 (disc u8, s64@64) labels@72. object (size 88): meta@0
// json@80. raw keeps the address of the lowered record (valid during the call) for events.emit.
type objectMeta struct {
	raw             unsafe.Pointer
	apiVersion      string
	kind            string
	namespace       *string
	name            string
	resourceVersion string
	labels          [][2]string
	json            string
}

func liftObject(p unsafe.Pointer) *objectMeta {
	m := &objectMeta{raw: p}
	m.apiVersion = at[wstring](p, 0).String()
	m.kind = at[wstring](p, 8).String()
	if *at[uint8](p, 16) != 0 {
		ns := at[wstring](p, 20).String()
		m.namespace = &ns
	}
	m.name = at[wstring](p, 28).String()
	m.resourceVersion = at[wstring](p, 44).String()
	m.json = at[wstring](p, 80).String()
	l := at[wstring](p, 72) // list of tuple<string, string>, 16 bytes each
	for i := uint32(0); i < l.len; i++ {
		t := unsafe.Pointer(uintptr(l.ptr) + uintptr(i)*16)
		m.labels = append(m.labels, [2]string{at[wstring](t, 0).String(), at[wstring](t, 8).String()})
	}
	return m
}

//go:wasmimport kubewasm:handler/log@0.2.0 log
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

// events.emit has more than 16 flat parameters, so they are passed in memory (size 112, align 8):
// regarding: object-meta@0, type u8@80, reason@84, action@92, note@100.
//
//go:wasmimport kubewasm:handler/events@0.2.0 emit
func hostEmit(args unsafe.Pointer)

const (
	eventNormal  = 0
	eventWarning = 1
)

func emitEvent(regarding *objectMeta, eventType uint8, reason, action, note string) {
	args := make([]uint64, 14)
	p := unsafe.Pointer(&args[0])
	// The object-meta the host lowered for this call is still in place: copy it as is.
	copy(unsafe.Slice((*byte)(p), 80), unsafe.Slice((*byte)(regarding.raw), 80))
	*at[uint8](p, 80) = eventType
	*at[wstring](p, 84) = lower(reason)
	*at[wstring](p, 92) = lower(action)
	*at[wstring](p, 100) = lower(note)
	hostEmit(p)
	runtime.KeepAlive(args)
}

type handlerError struct {
	tag uint32 // tagRetry or tagFatal
	msg string
}

const (
	tagRetry = 0
	tagFatal = 1
)

// result<_, handler-error> return area (size 12, align 4): disc u8@0, handler-error@4 (case u8@4,
// string@8).
var retArea [4]uint32

func result(err *handlerError) unsafe.Pointer {
	retArea = [4]uint32{}
	if err != nil {
		s := lower(err.msg)
		retArea = [4]uint32{1, err.tag, s.ptr, s.len}
	}
	return unsafe.Pointer(&retArea)
}

type subscription struct {
	apiVersion, kind string
	namespace        *string
	resyncPeriodMs   uint64
}

type pluginInfo struct {
	name          string
	subscriptions []subscription
	events        bool
}

func lowerOption(p unsafe.Pointer, s *string) {
	if s != nil {
		*at[uint8](p, 0) = 1
		*at[wstring](p, 4) = lower(*s)
	}
}

// plugin-info (size 36, align 4): name@0 subscriptions@8 permissions@16 http-origins@24 events@32.
// subscription (size 80, align 8): api-version@0 kind@8 namespace@16 label-selector@28
// field-selector@40 (option<string>: disc u8, string@+4) resync-period-ms@56 metadata-only@64
// fields@68. Permissions and origins are left empty (this handler asks for none).
var describeArea [9]uint32

//go:wasmexport describe
func describe() unsafe.Pointer {
	enter()
	info := describeHandler()
	subs := make([]uint64, 10*len(info.subscriptions)+1) // zeroed: options none, lists empty
	keep = append(keep, subs)
	base := unsafe.Pointer(&subs[0])
	for i, s := range info.subscriptions {
		sp := unsafe.Add(base, 80*i)
		*at[wstring](sp, 0) = lower(s.apiVersion)
		*at[wstring](sp, 8) = lower(s.kind)
		lowerOption(unsafe.Add(sp, 16), s.namespace)
		*at[uint64](sp, 56) = s.resyncPeriodMs
	}
	name := lower(info.name)
	describeArea = [9]uint32{name.ptr, name.len, uint32(uintptr(base)), uint32(len(info.subscriptions))}
	if info.events {
		describeArea[8] = 1
	}
	return unsafe.Pointer(&describeArea)
}

//go:wasmexport cabi_post_describe
func postDescribe(unsafe.Pointer) { postReturn() }

// The event exports have more than 16 flat parameters, so they receive one pointer to them:
// on-add (object@0, bool@88), on-update (old@0, new@88, bool@176), on-delete (object@0, bool@88).

//go:wasmexport on-add
func onAdd(args unsafe.Pointer) unsafe.Pointer {
	enter()
	return result(onAddHandler(liftObject(args), *at[uint8](args, 88) != 0))
}

//go:wasmexport cabi_post_on-add
func postOnAdd(unsafe.Pointer) { postReturn() }

//go:wasmexport on-update
func onUpdate(args unsafe.Pointer) unsafe.Pointer {
	enter()
	return result(onUpdateHandler(liftObject(args), liftObject(unsafe.Add(args, 88)), *at[uint8](args, 176) != 0))
}

//go:wasmexport cabi_post_on-update
func postOnUpdate(unsafe.Pointer) { postReturn() }

//go:wasmexport on-delete
func onDelete(args unsafe.Pointer) unsafe.Pointer {
	enter()
	return result(onDeleteHandler(liftObject(args), *at[uint8](args, 88) != 0))
}

//go:wasmexport cabi_post_on-delete
func postOnDelete(unsafe.Pointer) { postReturn() }

//go:wasmexport on-synced
func onSynced() unsafe.Pointer {
	enter()
	return result(onSyncedHandler())
}

//go:wasmexport cabi_post_on-synced
func postOnSynced(unsafe.Pointer) { postReturn() }
