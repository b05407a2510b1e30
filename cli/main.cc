#include <cstdio>
int main() { std::puts("feather: placeholder main"); return 0; }
