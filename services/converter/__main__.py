from ayci.worker import main

main("converter")
