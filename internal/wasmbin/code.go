package wasmbin

// ScanCode decodes every function body of a code section (s.ID must be
// SecCode) as Parse does, without the rest of the module: the number of
// bodies is not checked against the function section, and CompileCost
// leaves out parameters (their number is in the type section). It refuses
// what Parse refuses in a code section: opcodes outside WebAssembly 2.0,
// bodies over 7,654,321 bytes, more than 50,000 locals in a function, and
// so on. Work and memory are bounded by the section's size.
func ScanCode(s Section) (Code, error) {
	var c Code
	r := s.Reader()
	if err := c.scanSection(r, -1, nil); err != nil {
		return Code{}, err
	}
	return c, r.End("code")
}

// scanSection reads a code section of numFuncs bodies (-1: any number);
// params returns the number of parameters of function i (nil: 0).
func (c *Code) scanSection(r *Reader, numFuncs int, params func(i int) int) error {
	n, err := r.Count("function bodies", maxFunctions, 2)
	if err != nil {
		return err
	}
	if numFuncs >= 0 && n != numFuncs {
		return r.Failf("%d function bodies for %d functions", n, numFuncs)
	}
	for i := 0; i < n; i++ {
		size, err := r.U32()
		if err != nil {
			return err
		}
		if size > maxFunctionBody {
			return r.Failf("function body of %d bytes exceeds the limit of %d", size, maxFunctionBody)
		}
		body, err := r.Bytes(int(size))
		if err != nil {
			return err
		}
		br := NewReader(body, r.base+r.off-len(body))
		groups, err := br.Count("local groups", maxLocals, 2)
		if err != nil {
			return err
		}
		locals := 0
		for j := 0; j < groups; j++ {
			k, err := br.U32()
			if err != nil {
				return err
			}
			if int64(locals)+int64(k) > maxLocals {
				return br.Failf("more than %d locals in function %d", maxLocals, i)
			}
			locals += int(k)
			if _, err := br.ValType(); err != nil {
				return err
			}
		}
		if params != nil {
			locals += params(i)
		}
		if err := c.scanInstructions(br, int64(locals)); err != nil {
			return err
		}
	}
	return nil
}

// Weights of the compile-cost estimate (see Code.CompileCost).
const (
	loopWeight   = 8  // a loop opened at depth d costs 8d, a block or if d
	localsWeight = 13 // per local (parameters included) per block opened
)

// scanInstructions walks one function body's instructions, decoding every
// immediate, and records the opcodes the sandbox cares about and the
// function's share of the compile-cost estimate. Unknown opcodes are
// refused.
func (c *Code) scanInstructions(r *Reader, locals int64) error {
	var opens, nesting int64
	defer func() { c.CompileCost += nesting + localsWeight*locals*opens }()
	depth := 1 // the function body is a block
	for depth > 0 {

		op, err := r.Byte()
		if err != nil {
			return err
		}
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			opens++
			c.blocks++
			if op == 0x03 {
				c.blocks += loopBlocks - 1
			}
			if op == 0x03 {
				nesting += loopWeight * int64(depth)
			} else {
				nesting += int64(depth)
			}
			depth++
			err = blockType(r)
		case op == 0x0b: // end
			depth--
		case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b:
			// unreachable, nop, else, return, drop, select
		case op == 0x0c || op == 0x0d || op == 0x10: // br, br_if, call
			_, err = r.U32()
		case op == 0x0e: // br_table
			var k int
			if k, err = r.Count("br_table targets", 1<<30, 1); err == nil {
				for j := 0; j <= k && err == nil; j++ {
					_, err = r.U32()
				}
			}
		case op == 0x11: // call_indirect typeidx tableidx
			if _, err = r.U32(); err == nil {
				_, err = r.U32()
			}
		case op == 0x1c: // select t*
			var k int
			if k, err = r.Count("select types", 1<<30, 1); err == nil {
				for j := 0; j < k && err == nil; j++ {
					_, err = r.ValType()
				}
			}
		case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
			c.MutatesTables = c.MutatesTables || op == 0x26
			_, err = r.U32()
		case op >= 0x28 && op <= 0x3e: // loads and stores
			err = memArg(r)
		case op == 0x3f || op == 0x40: // memory.size, memory.grow
			_, err = r.U32()
		case op == 0x41:
			_, err = r.Signed(32)
		case op == 0x42:
			_, err = r.Signed(64)
		case op == 0x43:
			err = r.Skip(4)
		case op == 0x44:
			err = r.Skip(8)
		case op >= 0x45 && op <= 0xc4: // numeric, no immediates
		case op == 0xd0:
			_, err = r.RefType()
		case op == 0xd1:
		case op == 0xd2:
			_, err = r.U32()
		case op == 0xfc:
			err = c.miscOp(r)
		case op == 0xfd:
			err = simdOp(r)
		default:
			return r.Failf("unsupported opcode 0x%02x", op)
		}
		if err != nil {
			return err
		}
	}
	if !r.EOF() {
		return r.Failf("%d bytes after the end of a function body", r.Remaining())
	}
	return nil
}

func blockType(r *Reader) error {
	if r.EOF() {
		return r.Failf("unexpected end")
	}
	switch c := r.b[r.off]; c {
	case 0x40, ValI32, ValI64, ValF32, ValF64, ValV128, ValFuncref, ValExternref:
		r.off++
		return nil
	}
	v, err := r.Signed(33)
	if err == nil && v < 0 {
		err = r.Failf("invalid block type")
	}
	return err
}

func memArg(r *Reader) error {
	if _, err := r.U32(); err != nil {
		return err
	}
	_, err := r.U32()
	return err
}

func (c *Code) miscOp(r *Reader) error {
	sub, err := r.U32()
	if err != nil {
		return err
	}
	switch sub {
	case 0, 1, 2, 3, 4, 5, 6, 7: // saturating truncations
		return nil
	case 8: // memory.init dataidx memidx
		c.UsesDataIndex = true
		if _, err = r.U32(); err == nil {
			_, err = r.U32()
		}
	case 9: // data.drop
		c.UsesDataIndex = true
		_, err = r.U32()
	case 10: // memory.copy
		if _, err = r.U32(); err == nil {
			_, err = r.U32()
		}
	case 11: // memory.fill
		_, err = r.U32()
	case 12, 14: // table.init, table.copy
		c.MutatesTables = true
		if _, err = r.U32(); err == nil {
			_, err = r.U32()
		}
	case 13, 16: // elem.drop, table.size
		c.MutatesTables = c.MutatesTables || sub == 13
		_, err = r.U32()
	case 15, 17: // table.grow, table.fill
		c.MutatesTables = true
		var t uint32
		if t, err = r.U32(); err == nil {
			if c.GrownTables == nil {
				c.GrownTables = map[uint32]bool{}
			}
			c.GrownTables[t] = true
		}
	default:
		return r.Failf("unsupported opcode 0xfc %d", sub)
	}
	return err
}

func simdOp(r *Reader) error {
	sub, err := r.U32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 0x0b, sub == 0x5c, sub == 0x5d: // loads, store
		return memArg(r)
	case sub == 0x0c, sub == 0x0d: // v128.const, i8x16.shuffle
		return r.Skip(16)
	case sub >= 0x15 && sub <= 0x22: // extract/replace lane
		return r.Skip(1)
	case sub >= 0x54 && sub <= 0x5b: // load/store lane
		if err := memArg(r); err != nil {
			return err
		}
		return r.Skip(1)
	case sub <= 0xff:
		return nil // no immediates; wazero refuses the unassigned ones
	}
	return r.Failf("unsupported opcode 0xfd %d", sub)
}
