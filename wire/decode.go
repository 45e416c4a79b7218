package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/skulkrt/skulk/frame"
	"github.com/skulkrt/skulk/frame/mpack"
	"github.com/skulkrt/skulk/wire/internal/protocol"
	"github.com/vmihailenco/msgpack/v5"
)

// Decode decodes one whole packet held in b (prefix, header, attachment, and
// nothing after). It checks lengths against l (made Effective) before looking
// at the header. Every slice of the packet it returns is new: the caller
// may keep it, and b may be reused at once.
func Decode(b []byte, l Limits) (Packet, error) {
	l = l.effective()
	if len(b) < protocol.PrefixLen {
		return nil, fmt.Errorf("%w: packet shorter than its prefix", protocol.ErrMalformedHeader)
	}
	h, a := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	if err := l.check(h, a); err != nil {
		return nil, err
	}
	if uint64(len(b)) != protocol.PrefixLen+uint64(h)+uint64(a) {
		return nil, fmt.Errorf("%w: packet length does not match its prefix", protocol.ErrMalformedHeader)
	}
	var d decoder
	p, err := d.decode(b[protocol.PrefixLen:protocol.PrefixLen+h], a)
	if err != nil {
		return nil, err
	}
	if a > 0 {
		att := make([]byte, a)
		copy(att, b[protocol.PrefixLen+h:])
		p.(*Frame).Media.(*frame.InlineMedia).Data = att
	}
	return p, nil
}

// Decoder decodes the packets of one connection as a reader takes them
// off it: the reader reads a packet's 8-byte prefix, checks its two
// lengths against its limits before it reads or allocates anything more
// (a header length of 0 or above max_header, or an attachment length
// above max_attachment, is a protocol error: the error Decode returns for
// the prefix alone, since Decode checks the lengths first), reads the
// header, and hands it to
// DecodeHeader; the attachment it reads on its own, straight into a
// buffer of its choosing. A Decoder keeps what one packet tells about the
// next: the frames of one call share one call id string, and small
// payloads are copied side by side into 2 KiB blocks rather than
// allocated one by one (a small payload kept long after the others keeps
// its block alive). Decode reads a packet held whole, with none of this.
//
// Every frame packet DecodeHeader returns is the same *Frame, overwritten
// by the next frame it decodes: a reader is done with each frame before it
// decodes the next one, or keeps a copy (f := *p.(*Frame)), which shares
// nothing the Decoder writes again. Other packets are new each time.
//
// The zero Decoder is ready to use. A Decoder belongs to the one
// goroutine that reads its connection: it is not safe for concurrent use.
type Decoder struct {
	dec decoder
}

// DecodeHeader decodes the header h of one packet whose attachment, attLen
// bytes long, the caller reads on its own: an inline-media frame comes
// back with empty Data, for the caller to replace with the attLen bytes it
// reads. h holds no prefix, and its length and attLen must already have
// passed the limits' check (see Decoder). The packet holds no reference
// to h.
//
// expect, when not empty, is the call id the packet, or the next one that
// has a call id, will likely carry, as a host knows when it has just sent
// a call's invoke: a frame whose call id is expect then shares that string
// instead of allocating its own. Frames of one call share one string
// without it; the hint saves the allocation of a call's first frame.
//
// Errors are Decode's: an error matching ErrProtocol, after which the
// connection is unusable, or one matching frame.ErrInvalid for a frame,
// invoke or end that parsed but broke the rules (the caller reads or skips
// its attachment, and the connection stays in step).
func (d *Decoder) DecodeHeader(h []byte, attLen uint32, expect string) (Packet, error) {
	if expect != "" {
		d.dec.lastCallID = expect
	}
	d.dec.reuseFrames = true
	return d.dec.decode(h, attLen)
}

// decoder turns headers into packets, keeping what one packet's header
// tells about the next. Its zero value is ready; it belongs to the
// reader's goroutine.
type decoder struct {
	// lastCallID is the call id of the last packet decoded, shared by the
	// next one that repeats it (the frames of one call share one string).
	lastCallID string
	// lastMediaType is the media type of the last inline or blob media
	// decoded, shared likewise by the next one that repeats it.
	lastMediaType string
	// slab is room for the next small payloads' copies; never written twice.
	slab []byte
	// reuseFrames makes every frame packet decode into frame, overwritten
	// by the next one, instead of a new one each time.
	reuseFrames bool
	// frame is the reused frame packet, made on first use.
	frame *Frame
}

// Small payloads are copied into slabs rather than allocated one by one:
// a stream of small frames then costs one allocation per slab instead of
// one per frame. A slab is slabSize bytes and takes payloads up to
// slabPayload bytes, so it holds at least 16 of them; a payload kept after
// the others of its slab are dropped keeps its whole slab alive (at most
// slabSize bytes for one small payload).
const (
	slabSize    = 2048
	slabPayload = 128
)

// own returns a copy of b that shares nothing the decoder writes again: a
// small one is carved from the current slab, its capacity its length so
// that an append to it cannot reach its neighbour.
func (d *decoder) own(b []byte) frame.Payload {
	n := len(b)
	if n > slabPayload {
		return append(frame.Payload(nil), b...)
	}
	if len(d.slab) < n {
		d.slab = make([]byte, slabSize)
	}
	p := d.slab[:n:n]
	copy(p, b)
	d.slab = d.slab[n:]
	return frame.Payload(p)
}

// newFrame returns the packet a frame is decoded into: the reused one,
// cleared, or a new one.
func (d *decoder) newFrame() *Frame {
	if !d.reuseFrames {
		return &Frame{}
	}
	if d.frame == nil {
		d.frame = &Frame{}
	}
	*d.frame = Frame{}
	return d.frame
}

// internMediaType is intern for media types: the chunks of one stream
// share one string.
func (d *decoder) internMediaType(b []byte) string {
	if string(b) != d.lastMediaType {
		d.lastMediaType = string(b)
	}
	return d.lastMediaType
}

func (d *decoder) intern(b []byte) string {
	if string(b) == d.lastCallID {
		return d.lastCallID
	}
	d.lastCallID = string(b)
	return d.lastCallID
}

// fields iterates over a header map already checked by scanHeader.
type fields struct {
	r    mpack.Reader
	left int
}

func newFields(h []byte) fields {
	r := mpack.NewReader(h)
	n, _ := r.ReadMapLen()
	return fields{r: r, left: n}
}

func (it *fields) next() (key []byte, val mpack.Reader, ok bool) {
	if it.left == 0 {
		return nil, mpack.Reader{}, false
	}
	it.left--
	key, _ = it.r.ReadStr()
	raw, _ := it.r.Skip()
	return key, mpack.NewReader(raw), true
}

// scanHeader checks that h is exactly one map with string keys and returns
// the packet type its "t" names.
func scanHeader(h []byte) (protocol.Type, error) {
	r := mpack.NewReader(h)
	n, err := r.ReadMapLen()
	if err != nil {
		return 0, protocol.ErrMalformedHeader
	}
	var t protocol.Type
	seenT := false
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return 0, protocol.ErrMalformedHeader
		}
		isT := string(k) == "t"
		v, err := r.Skip()
		if err != nil {
			return 0, protocol.ErrMalformedHeader
		}
		if isT {
			vr := mpack.NewReader(v)
			s, err := vr.ReadStr()
			if err != nil {
				return 0, protocol.ErrUnknownType
			}
			t, seenT = protocol.ParseType(s), true
		}
	}
	if r.Remaining() != 0 {
		return 0, fmt.Errorf("%w: trailing bytes", protocol.ErrMalformedHeader)
	}
	if !seenT || t == 0 {
		return 0, protocol.ErrUnknownType
	}
	return t, nil
}

func badField(t protocol.Type, field string) error {
	return fmt.Errorf("%w: %s: %s", protocol.ErrBadField, t, field)
}

func invalidField(field, reason string) error {
	return &frame.FieldError{Field: field, Reason: reason}
}

// decode decodes header h of a packet whose attachment is attLen bytes long.
// The returned packet holds no reference to h.
//
// A frame whose header starts with "t" (as every encoder of ours writes it)
// is first tried in one pass by decodeFrameFast; whatever that pass does not
// accept goes through the general path below, which reports the error.
func (d *decoder) decode(h []byte, attLen uint32) (Packet, error) {
	if p := d.decodeFrameFast(h, attLen); p != nil {
		return p, nil
	}
	return d.decodeGeneral(h, attLen)
}

// decodeGeneral is decode for headers of any key order: scanHeader checks
// the whole map and finds "t", then the packet's decoder reads its fields.
func (d *decoder) decodeGeneral(h []byte, attLen uint32) (Packet, error) {
	t, err := scanHeader(h)
	if err != nil {
		return nil, err
	}
	if t == protocol.TypeFrame {
		return d.decodeFrame(h, attLen)
	}
	if attLen > 0 {
		return nil, protocol.ErrUnexpectedAttachment
	}
	switch t {
	case protocol.TypeEnd:
		p := &End{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			if string(k) == "call_id" {
				s, err := v.ReadStr()
				if err != nil {
					return nil, &protocol.InvalidError{Type: protocol.TypeEnd, Err: invalidField("call_id", "not a string")}
				}
				p.CallID = d.intern(s)
			}
		}
		if err := checkCallID(p.CallID); err != nil {
			return nil, &protocol.InvalidError{Type: protocol.TypeEnd, Err: err}
		}
		return p, nil
	case protocol.TypeInvoke:
		return d.decodeInvoke(h)
	case protocol.TypePing:
		p := &Ping{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			if string(k) == "nonce" {
				if p.Nonce, err = v.ReadUint(); err != nil {
					return nil, badField(t, "nonce")
				}
			}
		}
		return p, nil
	case protocol.TypePong:
		p := &Pong{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			switch string(k) {
			case "nonce":
				p.Nonce, err = v.ReadUint()
			case "streams":
				p.Streams, err = readCount(&v)
			case "stuck":
				p.Stuck, err = readCount(&v)
			}
			if err != nil {
				return nil, badField(t, string(k))
			}
		}
		return p, nil
	case protocol.TypeCancel:
		p := &Cancel{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			switch string(k) {
			case "call_id":
				p.CallID, err = readString(&v)
			case "reason":
				p.Reason, err = readOptString(&v)
			}
			if err != nil {
				return nil, badField(t, string(k))
			}
		}
		if checkCallID(p.CallID) != nil {
			return nil, badField(t, "call_id")
		}
		return p, nil
	case protocol.TypeDrain:
		p := &Drain{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			if string(k) == "grace_ms" {
				if p.GraceMS, err = readCount(&v); err != nil {
					return nil, badField(t, "grace_ms")
				}
			}
		}
		return p, nil
	case protocol.TypeBye:
		p := &Bye{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			if string(k) == "reason" {
				if p.Reason, err = readOptString(&v); err != nil {
					return nil, badField(t, "reason")
				}
			}
		}
		return p, nil
	case protocol.TypeStartup:
		p := &Startup{CancelGraceMS: protocol.DefaultCancelGraceMS} // absent: the default
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			switch string(k) {
			case "protocol":
				p.Protocol, err = v.ReadInt()
			case "child_id":
				p.ChildID, err = readString(&v)
			case "limits":
				p.Limits, err = readLimits(&v)
			case "health_interval_ms":
				p.HealthIntervalMS, err = readCount(&v)
			case "cancel_grace_ms":
				p.CancelGraceMS, err = readCount(&v)
			case "ingress_queue":
				p.IngressQueue, err = readCount(&v)
			case "calls":
				p.Calls, err = decodeCalls(&v)
			case "tools_updates":
				p.ToolsUpdates = false
				if !v.IsNil() {
					p.ToolsUpdates, err = v.ReadBool()
				}
			}
			if err != nil {
				return nil, badField(t, string(k))
			}
		}
		return p, nil
	case protocol.TypeHello:
		return decodeHello(h)
	case protocol.TypeTools:
		p := &Tools{}
		it := newFields(h)
		for k, v, ok := it.next(); ok; k, v, ok = it.next() {
			if string(k) == "tools" {
				if p.Tools, err = decodeTools(&v); err != nil {
					return nil, badField(t, "tools")
				}
			}
		}
		return p, nil
	}
	return nil, protocol.ErrUnknownType
}

func readString(r *mpack.Reader) (string, error) {
	s, err := r.ReadStr()
	return string(s), err
}

func readOptString(r *mpack.Reader) (string, error) {
	if r.IsNil() {
		return "", nil
	}
	return readString(r)
}

var errNegative = errors.New("negative")

func readCount(r *mpack.Reader) (int64, error) {
	v, err := r.ReadInt()
	if err == nil && v < 0 {
		err = errNegative
	}
	return v, err
}

func readLimits(r *mpack.Reader) (Limits, error) {
	var l Limits
	n, err := r.ReadMapLen()
	if err != nil {
		return l, err
	}
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return l, err
		}
		switch string(k) {
		case "max_header", "max_attachment":
			v, err := r.ReadUint()
			if err != nil {
				return l, err
			}
			if v > 1<<32-1 {
				v = 1<<32 - 1
			}
			if string(k) == "max_header" {
				l.MaxHeader = uint32(v)
			} else {
				l.MaxAttachment = uint32(v)
			}
		default:
			if _, err := r.Skip(); err != nil {
				return l, err
			}
		}
	}
	return l, nil
}

func (d *decoder) decodeFrame(h []byte, attLen uint32) (Packet, error) {
	p := d.newFrame()
	f := &p.Frame
	var first, mediaErr, errorErr error
	fail := func(field, reason string) {
		if first == nil {
			first = invalidField(field, reason)
		}
	}
	inline := false
	it := newFields(h)
	for k, v, ok := it.next(); ok; k, v, ok = it.next() {
		switch string(k) {
		case "call_id":
			s, err := v.ReadStr()
			if err != nil {
				f.CallID = ""
				fail("call_id", "not a string")
				continue
			}
			f.CallID = d.intern(s)
		case "direction":
			s, err := v.ReadStr()
			if err != nil {
				fail("direction", "not a string")
				continue
			}
			// An unknown name is 0, which the frame's validation below
			// refuses, unless a later occurrence of the key, which wins,
			// names a direction.
			f.Direction = parseDirection(s)
		case "sequence":
			u, err := v.ReadUint()
			if err != nil {
				fail("sequence", "not a non-negative integer")
			}
			f.Sequence = u
		case "kind":
			s, err := v.ReadStr()
			if err != nil {
				fail("kind", "not a string")
				continue
			}
			f.Kind = parseKind(s) // 0, refused below, unless a later occurrence wins

		case "synthetic":
			if v.IsNil() {
				continue
			}
			b, err := v.ReadBool()
			if err != nil {
				fail("synthetic", "not a boolean")
			} else if b {
				fail("synthetic", "synthetic frames never travel on the wire")
			}
		case "payload":
			if v.IsNil() {
				f.Payload = nil
				continue
			}
			raw, _ := v.Skip()
			f.Payload = d.own(raw)
		case "media":
			// The last occurrence wins, nil included: an earlier
			// invalid map stands only if nothing overrides it.
			f.Media, inline, mediaErr = d.decodeMedia(&v)
		case "error":
			f.Error, errorErr = decodeError(&v)
		}
	}
	if attLen > 0 && !inline {
		return nil, protocol.ErrUnexpectedAttachment
	}
	for _, err := range []error{mediaErr, errorErr} {
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = f.Validate()
	}
	if first != nil {
		return nil, &protocol.InvalidError{Type: protocol.TypeFrame, CallID: validCallID(f.CallID), Err: first}
	}
	return p, nil
}

// decodeFrameFast decodes, in one pass over h, a frame header whose first
// key is "t" and that the general path (scanHeader, then decodeFrame) would
// accept, and returns the same packet it would. It returns nil for anything
// else: another packet type, "t" not first or given twice, a key that is
// not a string, a malformed or wrongly typed value, trailing bytes, a field
// or a frame that breaks the rules, an attachment a frame may not have. The
// general path then decodes h again and reports exactly what is wrong, so
// every protocol check and error stays where it is, and only the packets
// that succeed are spared the second walk.
func (d *decoder) decodeFrameFast(h []byte, attLen uint32) *Frame {
	r := mpack.NewReader(h)
	n, err := r.ReadMapLen()
	if err != nil || n == 0 {
		return nil
	}
	body := r // after the map's header
	var p *Frame
	var left int // the keys still to read after the head
	if n >= 5 {
		p, left = d.canonicalHead(&r), n-5
	}
	if p == nil {
		r = body
		if k, err := r.ReadStr(); err != nil || string(k) != "t" {
			return nil
		}
		if v, err := r.ReadStr(); err != nil || string(v) != "frame" {
			return nil
		}
		p, left = d.newFrame(), n-1
	}
	f := &p.Frame
	inline := false
	for range left {
		k, err := r.ReadStr()
		if err != nil {
			return nil
		}
		// Each case reads its value or returns nil; a value read must be
		// whole (the typed reads check their lengths) so that the next
		// key starts where the general path's Skip would put it.
		switch string(k) {
		case "call_id":
			s, err := r.ReadStr()
			if err != nil {
				return nil
			}
			f.CallID = d.intern(s)
		case "direction":
			s, err := r.ReadStr()
			if err != nil {
				return nil
			}
			if f.Direction = parseDirection(s); f.Direction == 0 {
				return nil
			}
		case "sequence":
			if f.Sequence, err = r.ReadUint(); err != nil {
				return nil
			}
		case "kind":
			s, err := r.ReadStr()
			if err != nil {
				return nil
			}
			if f.Kind = parseKind(s); f.Kind == 0 {
				return nil
			}
		case "payload":
			if r.IsNil() {
				f.Payload = nil
				continue
			}
			raw, err := r.ReadObject() // checked here: see validShape
			if err != nil {
				return nil
			}
			f.Payload = d.own(raw)
		case "synthetic":
			if r.IsNil() {
				continue
			}
			if b, err := r.ReadBool(); err != nil || b {
				return nil
			}
		case "media", "error":
			// Skip checks the whole value as scanHeader would (depth,
			// key types), which decodeMedia and decodeError rely on.
			raw, err := r.Skip()
			if err != nil {
				return nil
			}
			v := mpack.NewReader(raw)
			if string(k) == "media" {
				f.Media, inline, err = d.decodeMedia(&v)
			} else {
				f.Error, err = decodeError(&v)
			}
			if err != nil {
				return nil
			}
		case "t":
			return nil // given twice: the general path takes the last
		default:
			if _, err := r.Skip(); err != nil {
				return nil
			}
		}
	}
	if r.Remaining() != 0 || (attLen > 0 && !inline) || !validShape(f) {
		return nil
	}
	return p
}

// checkedPayload stands in for a payload whose bytes were checked already
// (validShape): an empty MessagePack map.
var checkedPayload = frame.Payload{0x80}

// validShape reports whether f passes frame.Validate, its payload's bytes
// (if any) being checked already, as ReadObject checks them while reading:
// for the check, the payload is stood in for by an empty object, which
// Validate's payload check passes at once, so that the bytes are not
// walked twice on the hot path (a 1 KiB record is walked in about as
// long as the rest of its decoding).
func validShape(f *frame.Frame) bool {
	p := f.Payload
	if p != nil {
		f.Payload = checkedPayload
	}
	err := f.Validate()
	f.Payload = p
	return err == nil
}

// canonicalHead reads the first five entries of a frame header written in
// this package's own layout (appendFrame): "t": "frame", then call_id,
// direction, sequence and kind, each fixed key (with the fixed values of t,
// direction and kind) matched as bytes. It returns nil, having read an
// unspecified part of r, when the header is laid out otherwise; the caller
// then reads it key by key.
func (d *decoder) canonicalHead(r *mpack.Reader) *Frame {
	if !r.Prefix(encFrameHead) {
		return nil
	}
	id, err := r.ReadStr()
	if err != nil {
		return nil
	}
	var dir frame.Direction
	switch {
	case r.Prefix(encDirections[frame.ProviderToCaller]):
		dir = frame.ProviderToCaller
	case r.Prefix(encDirections[frame.CallerToProvider]):
		dir = frame.CallerToProvider
	default:
		return nil
	}
	seq, err := r.ReadUint()
	if err != nil {
		return nil
	}
	if !r.Prefix(encKindKey) {
		return nil
	}
	name, err := r.ReadStr()
	if err != nil {
		return nil
	}
	kind := parseKind(name)
	if kind == 0 {
		return nil
	}
	p := d.newFrame()
	p.CallID, p.Direction, p.Sequence, p.Kind = d.intern(id), dir, seq, kind
	return p
}

// parseDirection returns the frame.Direction named in b, without
// converting it to a string; it returns 0 for an unknown name.
func parseDirection(b []byte) frame.Direction {
	switch string(b) {
	case "provider_to_caller":
		return frame.ProviderToCaller
	case "caller_to_provider":
		return frame.CallerToProvider
	}
	return 0
}

// parseKind returns the frame.Kind named in b, without converting it
// to a string; it returns 0 for an unknown name.
func parseKind(b []byte) frame.Kind {
	switch string(b) {
	case "started":
		return frame.KindStarted
	case "chunk":
		return frame.KindChunk
	case "completed":
		return frame.KindCompleted
	case "failed":
		return frame.KindFailed
	case "cancelled":
		return frame.KindCancelled
	}
	return 0
}

// decodeMedia decodes a media value: nil is no media, anything else must be a
// media map. isInline reports whether its kind is "inline", even when another
// field is invalid, so that the reader knows an attachment was allowed. On
// error m is nil.
func (d *decoder) decodeMedia(r *mpack.Reader) (m frame.Media, isInline bool, err error) {
	if r.IsNil() {
		return nil, false, nil
	}
	n, err := r.ReadMapLen()
	if err != nil {
		return nil, false, invalidField("media", "not a map")
	}
	var (
		kind                                  string
		mediaType, codec, blobID, sha         string
		sampleRate, channels, size            int64
		hasRate, hasChannels, hasSize, hasSHA bool
		ts, dur                               *float64
		first                                 error
	)
	fail := func(field, reason string) {
		if first == nil {
			first = invalidField(field, reason)
		}
	}
	for range n {
		k, kerr := r.ReadStr()
		if kerr != nil {
			// The header was checked whole by scanHeader: skipping
			// the key and its value cannot fail.
			fail("media", "key not a string")
			_, _ = r.Skip()
			_, _ = r.Skip()
			continue
		}
		raw, _ := r.Skip()
		v := mpack.NewReader(raw)
		if v.IsNil() {
			// An optional key given as nil is absent; it also undoes
			// an earlier duplicate of the same key.
			switch string(k) {
			case "kind":
				kind = ""
			case "media_type":
				mediaType = ""
			case "codec":
				codec = ""
			case "blob_id":
				blobID = ""
			case "sha256":
				sha, hasSHA = "", false
			case "sample_rate":
				sampleRate, hasRate = 0, false
			case "channels":
				channels, hasChannels = 0, false
			case "size_bytes":
				size, hasSize = 0, false
			case "timestamp_seconds":
				ts = nil
			case "duration_seconds":
				dur = nil
			}
			continue
		}
		var err error
		switch key := string(k); key {
		case "kind":
			// Compared, never kept: only "inline" and "blob" mean
			// anything, so the value needs no string of its own.
			var b []byte
			b, err = v.ReadStr()
			switch string(b) {
			case "inline":
				kind = "inline"
			case "blob":
				kind = "blob"
			default:
				kind = "other"
			}
		case "media_type":
			var b []byte
			b, err = v.ReadStr()
			mediaType = d.internMediaType(b)
		case "codec":
			codec, err = readString(&v)
		case "blob_id":
			blobID, err = readString(&v)
		case "sha256":
			sha, err = readString(&v)
			hasSHA = true
		case "sample_rate":
			sampleRate, err = v.ReadInt()
			hasRate = true
		case "channels":
			channels, err = v.ReadInt()
			hasChannels = true
		case "size_bytes":
			size, err = v.ReadInt()
			hasSize = true
		case "timestamp_seconds", "duration_seconds":
			var x float64
			x, err = v.ReadFloat()
			if key == "timestamp_seconds" {
				ts = &x
			} else {
				dur = &x
			}
		case "data":
			fail("media.data", "inline data travels as the attachment")
		}
		if err != nil {
			fail("media."+string(k), "wrong type")
		}
	}
	switch kind {
	case "inline":
		if hasRate && sampleRate <= 0 {
			fail("media.sample_rate", "must be > 0")
		}
		if hasChannels && channels <= 0 {
			fail("media.channels", "must be > 0")
		}
		if first != nil {
			return nil, true, first
		}
		return &frame.InlineMedia{Data: []byte{}, MediaType: mediaType, Codec: codec, SampleRate: sampleRate,
			Channels: channels, TimestampSeconds: ts, DurationSeconds: dur}, true, nil
	case "blob":
		if !hasSize {
			fail("media.size_bytes", "required")
		}
		if !hasSHA {
			fail("media.sha256", "required")
		}
		if first != nil {
			return nil, false, first
		}
		return &frame.BlobMedia{BlobID: blobID, SizeBytes: size, SHA256: sha, MediaType: mediaType}, false, nil
	}
	return nil, false, invalidField("media.kind", "unknown value")
}

// decodeError decodes an error value: nil is no error, anything else must be
// an error map.
func decodeError(r *mpack.Reader) (*frame.Error, error) {
	if r.IsNil() {
		return nil, nil
	}
	n, err := r.ReadMapLen()
	if err != nil {
		return nil, invalidField("error", "not a map")
	}
	e := &frame.Error{}
	var codeErr error // an unknown code, unless a later occurrence of the key names one
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return nil, invalidField("error", "key not a string")
		}
		raw, _ := r.Skip()
		v := mpack.NewReader(raw)
		switch string(k) {
		case "code":
			s, err := v.ReadStr()
			if err != nil {
				return nil, invalidField("error.code", "not a string")
			}
			e.Code, codeErr = protocol.ParseCode(string(s))
		case "message":
			if v.IsNil() {
				continue
			}
			if e.Message, err = readString(&v); err != nil {
				return nil, invalidField("error.message", "not a string")
			}
		}
	}
	if codeErr != nil {
		return nil, codeErr
	}
	return e, nil
}

func (d *decoder) decodeInvoke(h []byte) (Packet, error) {
	p := &Invoke{}
	var first error
	fail := func(field, reason string) {
		if first == nil {
			first = invalidField(field, reason)
		}
	}
	hasArgs := false
	it := newFields(h)
	for k, v, ok := it.next(); ok; k, v, ok = it.next() {
		var err error
		switch key := string(k); key {
		case "call_id":
			var s []byte
			if s, err = v.ReadStr(); err == nil {
				p.CallID = d.intern(s)
			} else {
				p.CallID = ""
			}
		case "tool_id":
			p.ToolID, err = readString(&v)
		case "arguments":
			raw, _ := v.Skip()
			p.Arguments = d.own(raw)
			hasArgs = true
		case "timeout_ms":
			p.TimeoutMS = 0
			if !v.IsNil() {
				p.TimeoutMS, err = v.ReadInt()
			}
		case "tree":
			p.Tree, err = readOptString(&v)
		case "parent":
			p.Parent, err = readOptString(&v)
		case "depth":
			p.Depth = 0
			if !v.IsNil() {
				p.Depth, err = v.ReadInt()
			}
		case "detached":
			p.Detached = false
			if !v.IsNil() {
				p.Detached, err = v.ReadBool()
			}
		case "trace":
			p.Trace = nil
			if v.IsNil() {
				continue
			}
			p.Trace, err = readStringMap(&v)
		}
		if err != nil {
			fail(string(k), "wrong type")
		}
	}
	if !hasArgs {
		fail("arguments", "required")
	}
	if first == nil {
		first = p.validate()
	}
	if first != nil {
		return nil, &protocol.InvalidError{Type: protocol.TypeInvoke, CallID: validCallID(p.CallID), Err: first}
	}
	return p, nil
}

// decodeCalls reads startup's calls map (nil: not given). Every key is
// checked; unknown keys are ignored.
func decodeCalls(r *mpack.Reader) (*Calls, error) {
	if r.IsNil() {
		return nil, nil
	}
	n, err := r.ReadMapLen()
	if err != nil {
		return nil, err
	}
	c := &Calls{}
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return nil, err
		}
		raw, err := r.Skip()
		if err != nil {
			return nil, err
		}
		v := mpack.NewReader(raw)
		switch string(k) {
		case "socket":
			c.Socket, err = readString(&v)
		case "tools":
			c.Tools = nil
			if !v.IsNil() {
				c.Tools, err = decodeTools(&v)
			}
		case "max_depth":
			c.MaxDepth, err = v.ReadInt()
		case "max_in_flight":
			c.MaxInFlight, err = v.ReadInt()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func readStringMap(r *mpack.Reader) (map[string]string, error) {
	n, err := r.ReadMapLen()
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, min(n, 64))
	for range n {
		k, err := r.ReadStr()
		if err != nil {
			return nil, err
		}
		v, err := r.ReadStr()
		if err != nil {
			return nil, err
		}
		m[string(k)] = string(v)
	}
	return m, nil
}

func decodeHello(h []byte) (Packet, error) {
	p := &Hello{}
	it := newFields(h)
	for k, v, ok := it.next(); ok; k, v, ok = it.next() {
		var err error
		switch string(k) {
		case "protocol":
			var n int
			if n, err = v.ReadArrayLen(); err == nil {
				if n > 64 {
					return nil, badField(protocol.TypeHello, "protocol")
				}
				for range n {
					var x int64
					if x, err = v.ReadInt(); err != nil {
						break
					}
					p.Protocol = append(p.Protocol, x)
				}
			}
		case "sdk":
			p.SDK, err = readOptString(&v)
		case "pid":
			p.PID, err = v.ReadInt()
		case "max_streams":
			p.MaxStreams, err = v.ReadInt()
		case "limits":
			p.Limits, err = readLimits(&v)
		case "tools":
			p.Tools, err = decodeTools(&v)
		}
		if err != nil {
			return nil, badField(protocol.TypeHello, string(k))
		}
	}
	if p.MaxStreams < 1 {
		return nil, badField(protocol.TypeHello, "max_streams")
	}
	return p, nil
}

// maxTools bounds how many tools a hello or a tools packet may declare.
const maxTools = 4096

// maxToolVersionChars bounds a tool descriptor's version (docs/protocol.md §3).
const maxToolVersionChars = 128

func decodeTools(r *mpack.Reader) ([]Tool, error) {
	n, err := r.ReadArrayLen()
	if err != nil || n > maxTools {
		return nil, protocol.ErrBadField
	}
	if n == 0 {
		return nil, nil // no tools: nil, as when the key is absent
	}
	tools := make([]Tool, 0, min(n, 64))
	for range n {
		var t Tool
		m, err := r.ReadMapLen()
		if err != nil {
			return nil, err
		}
		for range m {
			k, err := r.ReadStr()
			if err != nil {
				return nil, err
			}
			raw, _ := r.Skip()
			v := mpack.NewReader(raw)
			var dst *map[string]any
			switch string(k) {
			case "id":
				t.ID, err = readString(&v)
			case "version":
				t.Version, err = readOptString(&v)
			case "description":
				t.Description, err = readOptString(&v)
			case "arguments_schema":
				dst = &t.ArgumentsSchema
			case "input_schema":
				dst = &t.InputSchema
			case "output_schema":
				dst = &t.OutputSchema
			case "result_schema":
				dst = &t.ResultSchema
			case "input_media":
				t.InputMedia, err = v.ReadBool()
			case "no_input":
				t.NoInput, err = v.ReadBool()
			}
			if err != nil {
				return nil, err
			}
			if dst != nil && !v.IsNil() {
				if err := mpack.CheckObject(raw); err != nil {
					return nil, err
				}
				if err := decodeSchema(raw, dst); err != nil {
					return nil, err
				}
			}
		}
		if checkID("id", t.ID) != nil || !utf8.ValidString(t.Version) || utf8.RuneCountInString(t.Version) > maxToolVersionChars {
			return nil, protocol.ErrBadField
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// decodeSchema decodes a schema already checked by mpack.CheckObject. Numbers
// come out as int64 (fixints and signed encodings), uint64 (unsigned
// encodings) or float64, never as the sized types int8, float32 and so on;
// each number comes out as its canonical encoding decodes to (see
// canonicalNumber), so that a decoded schema encodes and decodes again to
// itself.
func decodeSchema(raw []byte, dst *map[string]any) error {
	dec := msgpack.NewDecoder(bytes.NewReader(raw))
	dec.UseLooseInterfaceDecoding(true)
	if err := dec.Decode(dst); err != nil {
		return err
	}
	for k, v := range *dst {
		(*dst)[k] = canonicalNumber(v)
	}
	return nil
}

// canonicalNumber returns v with every number turned into what the
// encoder's form of it decodes to, in maps and arrays in place: the encoder
// writes each number in its smallest encoding (UseCompactInts,
// UseCompactFloats: an integral float as an integer), which decodes to
// uint64 from 128 up (the unsigned encodings) and int64 below (fixints and
// the signed encodings). So int16-encoded 200 and 200.0 both come out as
// uint64 200, and a uint8-encoded 5 as int64 5. The depth is bounded by
// mpack.CheckObject's.
func canonicalNumber(v any) any {
	switch x := v.(type) {
	case int64:
		if x >= 128 {
			return uint64(x)
		}
	case uint64:
		if x < 128 {
			return int64(x)
		}
	case float64:
		// AppendValue writes an integral float in int64's range as that
		// integer (mpack's rule, which handles the edges); reading it back
		// as an integer applies the same rule here. Schemas are decoded
		// once per tool catalogue, off the hot path.
		b, _ := mpack.AppendValue(nil, x)
		r := mpack.NewReader(b)
		if n, err := r.ReadInt(); err == nil {
			return canonicalNumber(n)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumber(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumber(e)
		}
	}
	return v
}
