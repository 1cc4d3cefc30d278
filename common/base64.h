// common/base64.h — standard base64 (RFC 4648, padded), the encoding of an uploaded file in a request.
//
// Owns `base64_encode` and `base64_decode`: the server decodes a job's
// model_file (service/request_check.h), tapp-cli optimize --server encodes the
// TorchScript file it uploads. Decoding skips line breaks and spaces and
// refuses any other byte outside the alphabet, and data after padding.
// Thread safety: pure functions.
#pragma once

#include <string>

namespace tapp {

inline constexpr char kBase64Alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

inline bool base64_decode(const std::string& in, std::string& out) {
  int table[256];
  for (int& t : table) t = -1;
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kBase64Alphabet[i])] = i;
  out.clear();
  out.reserve(in.size() / 4 * 3);
  unsigned buf = 0;
  int bits = 0, pad = 0;
  for (char ch : in) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n' || c == '\r' || c == ' ') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad || table[c] < 0) return false;
    buf = (buf << 6) | static_cast<unsigned>(table[c]);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xff));
    }
  }
  return pad <= 2;
}

inline std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  unsigned buf = 0;
  int bits = 0;
  for (unsigned char c : in) {
    buf = (buf << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kBase64Alphabet[(buf >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kBase64Alphabet[(buf << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

}  // namespace tapp
