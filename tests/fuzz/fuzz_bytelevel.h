/* GPT-2 byte-level BPE's printable spelling of a byte, for the fuzzers that
 * build small byte-level tokenizers. */
#ifndef DI_FUZZ_BYTELEVEL_H
#define DI_FUZZ_BYTELEVEL_H

static const char *fuzz_bl_char(int b, char out[4]) {
  int cp;
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
    cp = b;
  } else {
    int n = 0;
    for (int k = 0; k < b; k++)
      if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) n++;
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp, out[1] = 0;
  } else {
    out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
  }
  return out;
}

#endif
