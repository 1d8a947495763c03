// The header compiles as C++17 with every warning an error.
#include <mqblk.h>

int main()
{
	mqblk *dev = nullptr;
	int rc = mqblk_open("null", &dev);
	if (rc == 0)
		mqblk_close(dev);
	return rc == MQBLK_ERROR_OK ? 0 : 1;
}
