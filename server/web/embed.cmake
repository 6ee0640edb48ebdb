# server/web/embed.cmake: turns the chat page (server/web/index.html) into web_page.h, a C byte
# array that server/http/web_ui.c compiles in. Run by the build (server/http/CMakeLists.txt) whenever the
# page changes: cmake -DIN=index.html -DOUT=web_page.h -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR n "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REPEAT "0x..," 16 line) # 16 bytes a line
string(REGEX REPLACE "(${line})" "\\1\n  " bytes "${bytes}")
file(WRITE "${OUT}.tmp"
  "/* web_page.h: generated from server/web/index.html by server/web/embed.cmake; do not edit. */\n"
  "static const unsigned char web_page[] = {\n  ${bytes}0x00};\n"
  "static const unsigned long web_page_len = ${n}ul;\n")
file(RENAME "${OUT}.tmp" "${OUT}")
